"""The quality bench's corpus: seeded agent sessions, as cairn events, with planted facts of known kinds.

Every session is a list of real log records (`events.kinds`: session-started,
user-message, turn-started, assistant-message with tool calls, tool-result,
turn-completed), so it folds with the same `replay`/`evolve` as a live log
and goes through the real compactor. `corpus(per_kind, seed)` builds
`per_kind` sessions of each of the eight kinds, from one `random.Random(seed)`
in a fixed order: the same seed always gives byte-identical sessions.

Kinds (the shapes agents produce):

| kind              | shape                                                                      |
|-------------------|----------------------------------------------------------------------------|
| coding            | one turn: reads, edits (write effect), test runs, a benchmark              |
| debugging         | one turn: the same test failing 4-7 times with one error, then the fix     |
| research          | one turn: 25-40 reads, greps and web fetches; findings, then a decision    |
| task-change       | turn 1 on task A, then the user replaces it with task B (A is superseded)  |
| steering          | one turn with 2-3 user messages sent mid-turn (a correction among them)    |
| images            | screenshots (image parts) from the user with captions, then coding         |
| huge-output       | two or three tool outputs of 30,000-90,000 chars, facts near their end     |
| multi-compaction  | a long coding turn compacted three times (after 35 %, 65 % and 100 %)      |

Every other kind is compacted once, at its end, while its turn is still open
(as a threshold compaction happens: before the next request).

Planted facts (`Fact`), each with anchors that filler text never contains
(a per-session 4-hex suffix, or a number with a unit that filler never
prints):

| kind        | planted as                                                 | anchors                    |
|-------------|------------------------------------------------------------|----------------------------|
| task        | first line of the turn's user request                      | function, goal phrase      |
| constraint  | a line of the request (or a steering message)              | identifier, rule phrase    |
| identifier  | a path written by an edit, a class found by grep           | the path / the name        |
| decision    | an assistant line "Decision: X rather than Y because R"    | X, the reason phrase       |
| error       | a failing test's error line                                | the exact error text       |
| fix         | an assistant line naming the error and the fixed function  | error text, function       |
| number      | a measured or configured value in tool output              | value with its unit        |
| next-action | an assistant line "Next: run `<command>` ..." left pending | the exact command          |
| superseded  | a value, task or decision later replaced by another fact   | the old value              |

A superseded fact names the fact that replaced it (`replaced_by`); the newer
one is probed as a fact of its own kind. Some sessions (every third) also
state the pending next action as an exact continuation record (C8), so the
host keeps it whatever the summary says.

Apart from the corpus, `spent_record_sessions` builds a probe set of one
shape C8 alone got wrong: the agent records its next action as an exact
continuation record, runs that very command (it passes), then plans a new
next action in plain text and works on. The recorded command is then a
superseded fact. C8 alone carried the record verbatim as the next action in
every later ledger; the spent rule (beyond C8, `actors.compactor.ledger`)
moves it under Verification evidence as no longer pending, because the
command ran as the arguments of a successful tool call after the record.
"""

from __future__ import annotations

import random

from cairn.bench.quality_builder import WORDS, FactNames, Session, SessionBuilder
from cairn.events.model import ImagePart, TextPart

SEED = 20_261_203
_Q_TASK = "Which function does the current task ask to change?"
KINDS = (
    "coding",
    "debugging",
    "research",
    "task-change",
    "steering",
    "images",
    "huge-output",
    "multi-compaction",
)
#: fact kinds whose anchors are statements (all anchors within one line), not bare strings
STATEMENT_KINDS = frozenset({"task", "constraint", "decision", "fix", "next-action"})

_ALTERNATIVES = ("a sorted list", "a second index", "a background thread", "the json module", "an LRU dict")
_FIXES = ("guarding against an empty segment", "copying the buffer first", "re-reading the lease")
_UNITS = (("ms", 2), ("MiB", 1), ("%", 2), ("s", 3))
_CAPTIONS = ("the dashboard", "the failing CI job", "the profiler flame graph", "the terminal")


# -- fact templates: each plants one fact (or a pair) and returns its key ----------------------


def _value(rng: random.Random) -> str:
    unit, digits = rng.choice(_UNITS)
    return f"{rng.uniform(10, 900):.{digits}f} {unit}"


def _task(b: SessionBuilder, nm: FactNames, extra: str = "") -> str:
    """Start a turn with a task and two constraints; plants task + constraints."""
    text = (
        f"Task: change `{nm.func}` so that it will {nm.goal}.\n"
        f"Constraint: {nm.rule} `{nm.cls}`.\n"
        f"Constraint: the final answer must end with the line {nm.done}.{extra}"
    )
    seq = b.start_turn(text)
    key = b.plant("task", (nm.func, nm.goal), seq, _Q_TASK, nm.func)
    b.plant("constraint", (nm.rule, nm.cls), seq, "Which class does the user's constraint protect?", nm.cls)
    b.plant("constraint", (nm.done,), seq, "Which exact line must the final answer end with?", nm.done)
    return key


def _identifier(b: SessionBuilder, nm: FactNames) -> None:
    seq = b.tool(
        "edit",
        f'{{"path": "{nm.path}"}}',
        f"wrote {nm.path} (+{b.rng.randrange(3, 40)} -{b.rng.randrange(1, 20)} lines)",
        effect="write",
        text="Apply the change to the module.",
        path=nm.path,
    )
    b.plant("identifier", (nm.path,), seq, "Which file did the edit to the module write?", nm.path)
    hits = f"{b.filler_path()}:{b.rng.randrange(10, 300)}: class {nm.cls2}(Base):\n" + "\n".join(
        f"{b.filler_path()}:{b.rng.randrange(1, 400)}: {b.prose(6)}" for _ in range(5)
    )
    seq = b.tool("grep", '{"pattern": "class .*Reader"}', hits, text="Find the reader class.")
    b.plant("identifier", (nm.cls2,), seq, "What is the name of the reader class that grep found?", nm.cls2)


def _decision(b: SessionBuilder, nm: FactNames, reason: str, choice: str | None = None) -> str:
    choice = choice or f"`{nm.cls}.lookup`"
    alternative = b.rng.choice(_ALTERNATIVES)
    seq = b.say(f"Decision: use {choice} rather than {alternative} because {reason}.")
    name = choice.strip("`")
    question = f"Which method did the assistant decide to use because {reason}?"
    return b.plant("decision", (name, reason), seq, question, name)


def _number(b: SessionBuilder, label: str) -> str:
    value = _value(b.rng)
    out = f"{b.prose(30)}\n{label}: {value}\n{b.prose(20)}"
    seq = b.tool("bash", f'{{"cmd": "python -m bench {label.split()[0]}"}}', out, text="Measure it.")
    return b.plant("number", (f"{label}: {value}",), seq, f"What was the measured {label}?", value)


def _superseded_value(b: SessionBuilder, nm: FactNames, *, by_user: bool) -> None:
    old, new = b.rng.randrange(100, 5000), b.rng.randrange(5000, 9999)
    seq = b.tool(
        "read",
        f'{{"path": "{nm.path}"}}',
        f"{b.code(10)}\n{nm.const} = {old}\n{b.code(10)}",
        text="Read the current limit.",
        path=nm.path,
    )
    old_key = b.plant("number", (f"{nm.const} = {old}",), seq, "", str(old))
    b.filler(b.rng.randrange(2, 6))
    if by_user:
        seq = b.user((TextPart(f"Correction: set {nm.const} = {new}, the old value was too small."),))
    else:
        seq = b.tool(
            "edit",
            f'{{"path": "{nm.path}"}}',
            f"wrote {nm.path}: {nm.const} = {new}",
            effect="write",
            text="Raise the limit.",
            path=nm.path,
        )
    question = f"What is the current value of {nm.const}?"
    new_key = b.plant("number", (f"{nm.const} = {new}",), seq, question, str(new))
    b.supersede(old_key, new_key)


def _error_and_fix(b: SessionBuilder, nm: FactNames, failures: int) -> None:
    command = f"pytest {nm.test} -k {nm.case}"
    first = 0
    for attempt in range(failures):
        out = (
            f"{nm.test}::test_{nm.case} FAILED\n{b.code(6)}\nE   {nm.error}\n"
            f"===== 1 failed, {b.rng.randrange(5, 40)} passed ====="
        )
        seq = b.tool("bash", f'{{"cmd": "{command}"}}', out, status="error", text=b.maybe_text())
        first = first or seq
        if attempt < failures - 1:
            b.filler(b.rng.randrange(1, 4))
    b.plant("error", (nm.error,), first, "What exact error did the failing test raise?", nm.error)
    fix = b.rng.choice(_FIXES)
    seq = b.say(f"Fixed {nm.error} by {fix} in `{nm.func2}`.")
    b.plant("fix", (nm.error, nm.func2), seq, "Which function was changed to fix the failing test?", nm.func2)
    b.test_filler()


def _next_action(b: SessionBuilder, nm: FactNames, *, record: bool) -> None:
    command = f"pytest {nm.test} -k {nm.case} --maxfail=1"
    text = f"Next: run `{command}` once the fixture is regenerated."
    if record:
        text += f"\nEXACT CONTINUATION RECORD [Exact next action] :: {command}"
    seq = b.say(text)
    b.plant("next-action", (command,), seq, "What exact command is the pending next action?", command)


# -- the eight shapes ---------------------------------------------------------------------------


def _coding(b: SessionBuilder, index: int, *, steps: int = 1) -> None:
    nm = FactNames(b)
    _task(b, nm)
    b.filler(b.rng.randrange(4, 9))
    _identifier(b, nm)
    b.filler(b.rng.randrange(3, 8))
    _decision(b, nm, nm.reasons[0])
    b.filler(b.rng.randrange(3, 8))
    _superseded_value(b, nm, by_user=False)
    _error_and_fix(b, nm, 2)
    _number(b, "p99 latency")
    b.filler(b.rng.randrange(3, 8))
    _next_action(b, nm, record=index % 3 == 0)
    b.filler(b.rng.randrange(8, 14))
    b.compact_here()


def _debugging(b: SessionBuilder, index: int) -> None:
    nm = FactNames(b)
    _task(b, nm)
    b.filler(b.rng.randrange(2, 5))
    hypothesis = _decision(b, nm, nm.reasons[0], choice=f"`{nm.cls}.retry`")
    _error_and_fix(b, nm, b.rng.randrange(4, 8))
    new = _decision(b, nm, nm.reasons[1], choice=f"`{nm.cls}.rebuild`")
    b.supersede(hypothesis, new)
    _identifier(b, nm)
    _number(b, "peak memory")
    _next_action(b, nm, record=index % 3 == 0)
    b.filler(b.rng.randrange(8, 14))
    b.compact_here()


def _research(b: SessionBuilder, index: int) -> None:
    nm = FactNames(b)
    _task(b, nm)
    for i in range(b.rng.randrange(25, 40)):
        if i in (5, 14, 22):
            _number(b, ("max frame", "median fetch", "cache hit rate")[(5, 14, 22).index(i)])
            continue
        if i == 10:
            _identifier(b, nm)
            continue
        if not b.keeps_filler_step(i):
            continue
        url = f"https://docs.example.org/{b.rng.choice(WORDS)}/{b.rng.choice(WORDS)}"
        if b.rng.random() < 0.4:
            b.tool(
                "web-fetch", f'{{"url": "{url}"}}', b.prose(b.rng.randrange(200, 700)), text=b.maybe_text()
            )
        else:
            b.read_filler() if b.rng.random() < 0.6 else b.grep_filler()
    _superseded_value(b, nm, by_user=False)
    _decision(b, nm, nm.reasons[0])
    _next_action(b, nm, record=index % 3 == 0)
    b.filler(b.rng.randrange(6, 10))
    b.compact_here()


def _task_change(b: SessionBuilder, index: int) -> None:
    nm = FactNames(b)
    old_task = _task(b, nm)
    b.filler(b.rng.randrange(4, 8))
    _identifier(b, nm)
    _decision(b, nm, nm.reasons[0])
    b.filler(b.rng.randrange(3, 6))
    b.say("Stopping here as asked.")
    seq = b.start_turn(
        f"Change of plan: leave that work; instead make `{nm.func2}` {nm.goal2}.\n"
        f"Constraint: the final answer must end with the line {nm.done}."
    )
    new_task = b.plant("task", (nm.func2, nm.goal2), seq, _Q_TASK, nm.func2)
    b.supersede(old_task, new_task)
    b.filler(b.rng.randrange(4, 8))
    _error_and_fix(b, nm, 2)
    _number(b, "throughput")
    _next_action(b, nm, record=index % 3 == 0)
    b.filler(b.rng.randrange(8, 12))
    b.compact_here()


def _steering(b: SessionBuilder, index: int) -> None:
    nm = FactNames(b)
    _task(b, nm)
    b.filler(b.rng.randrange(4, 8))
    seq = b.user((TextPart(f"Also: keep `{nm.cls2}` thread-safe while you are at it."),))
    b.plant("constraint", (nm.cls2, "thread-safe"), seq, "Which class must be kept thread-safe?", nm.cls2)
    _identifier(b, nm)
    _superseded_value(b, nm, by_user=True)
    _decision(b, nm, nm.reasons[0])
    _error_and_fix(b, nm, 2)
    _next_action(b, nm, record=index % 3 == 0)
    b.filler(b.rng.randrange(8, 12))
    b.compact_here()


def _images(b: SessionBuilder, index: int) -> None:
    nm = FactNames(b)
    _task(b, nm)
    for n in range(b.rng.randrange(2, 4)):
        value = _value(b.rng)
        caption = (
            f"Screenshot of {b.rng.choice(_CAPTIONS)}: error rate {value} on route /v2/{nm.mod}{n}_{b.sfx}"
        )
        seq = b.user((TextPart(caption), ImagePart(data="iVBORw0KGgo" * 400)))
        route = f"/v2/{nm.mod}{n}_{b.sfx}"
        question = f"What error rate did the screenshot show on {route}?"
        b.plant("number", (f"error rate {value}",), seq, question, value)
        b.say(f"The screenshot shows {b.prose(12)}.")
        b.filler(b.rng.randrange(2, 5))
    _identifier(b, nm)
    _decision(b, nm, nm.reasons[0])
    _error_and_fix(b, nm, 2)
    _next_action(b, nm, record=index % 3 == 0)
    b.filler(b.rng.randrange(8, 12))
    b.compact_here()


def _huge_output(b: SessionBuilder, index: int) -> None:
    nm = FactNames(b)
    _task(b, nm)
    b.filler(b.rng.randrange(3, 6))
    for n in range(b.rng.randrange(2, 4)):
        value = _value(b.rng)
        log = "\n".join(f"[{i:06d}] {b.prose(10)}" for i in range(b.rng.randrange(500, 1400)))
        label = f"total records scanned {n}"
        out = f"{log}\n{label}: {value}\n{b.prose(15)}"
        seq = b.tool("bash", '{"cmd": "cairn verify --all"}', out, text="Run the full verification.")
        b.plant("number", (f"{label}: {value}",), seq, f"What was the {label}?", value)
        b.filler(b.rng.randrange(2, 4))
    _identifier(b, nm)
    _decision(b, nm, nm.reasons[0])
    _superseded_value(b, nm, by_user=False)
    _next_action(b, nm, record=index % 3 == 0)
    b.filler(b.rng.randrange(8, 12))
    b.compact_here()


def _multi(b: SessionBuilder, index: int) -> None:
    nm = FactNames(b)
    _task(b, nm)
    b.filler(b.rng.randrange(6, 10))
    _identifier(b, nm)
    _decision(b, nm, nm.reasons[0])
    _number(b, "p50 latency")
    b.filler(b.rng.randrange(10, 16))
    b.compact_here()
    _superseded_value(b, nm, by_user=False)
    _error_and_fix(b, nm, 3)
    _decision(b, nm, nm.reasons[1], choice=f"`{nm.cls2}.scan`")
    b.filler(b.rng.randrange(10, 16))
    b.compact_here()
    _number(b, "p99 latency")
    _next_action(b, nm, record=index % 3 == 0)
    b.filler(b.rng.randrange(10, 16))
    b.compact_here()


_SHAPES = {
    "coding": _coding,
    "debugging": _debugging,
    "research": _research,
    "task-change": _task_change,
    "steering": _steering,
    "images": _images,
    "huge-output": _huge_output,
    "multi-compaction": _multi,
}


def build_session(kind: str, index: int, rng: random.Random, filler_scale: float = 1.0) -> Session:
    """The `index`-th session of `kind`, drawn from `rng`. `filler_scale` < 1 makes a shorter one with
    the same shape and planted facts (fewer filler tool calls between them): the judge's own set."""
    b = SessionBuilder(f"{kind}-{index}", rng, filler_scale=filler_scale)
    _SHAPES[kind](b, index)
    return b.session(kind)


def corpus(per_kind: int, seed: int = SEED) -> list[Session]:
    """`per_kind` sessions of every kind (kinds interleaved), all drawn from one seeded generator."""
    rng = random.Random(seed)
    return [build_session(kind, i, rng) for i in range(per_kind) for kind in KINDS]


def _spent_record(b: SessionBuilder, index: int) -> None:
    """A recorded next action, run, then replaced by a plain-text plan (the module doc)."""
    nm = FactNames(b)
    _task(b, nm)
    b.filler(b.rng.randrange(4, 8))
    done = f"pytest {nm.test} -k {nm.case}_first"
    seq = b.say(f"Next: run `{done}`.\nEXACT CONTINUATION RECORD [Exact next action] :: {done}")
    old = b.plant("next-action", (done,), seq, "", done)
    b.tool("bash", f'{{"cmd": "{done}"}}', f"===== {b.rng.randrange(5, 40)} passed =====", text="Run it.")
    b.filler(b.rng.randrange(3, 6))
    pending = f"pytest {nm.test} -k {nm.case}_second --maxfail=1"
    seq = b.say(f"Next: run `{pending}` once the fixture is regenerated.")
    question = "What exact command is the pending next action?"
    b.supersede(old, b.plant("next-action", (pending,), seq, question, pending))
    b.filler(b.rng.randrange(10, 14))
    b.compact_here()


#: the spent-record probe set's own seed (the corpus stays byte-identical without it)
SPENT_RECORD_SEED = 20_261_205


def spent_record_sessions(count: int, seed: int = SPENT_RECORD_SEED) -> list[Session]:
    """`count` sessions of the spent-record shape (the module doc), from one seeded generator."""
    rng = random.Random(seed)
    out = []
    for index in range(count):
        b = SessionBuilder(f"spent-record-{index}", rng)
        _spent_record(b, index)
        out.append(b.session("spent-record"))
    return out
