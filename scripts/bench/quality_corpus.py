"""The quality bench's corpus: seeded agent sessions, as real cairn events, with planted facts of known kinds.

`corpus(per_kind, seed)` builds `per_kind` sessions of each of eight shapes
(`KINDS`: one coding turn; a test failing 4-7 times then fixed; 25-40 reads
and fetches then a decision; a task replaced midway; steering messages
mid-turn; screenshots; tool outputs of 30,000-90,000 chars; a long turn
compacted three times) from one `random.Random(seed)`: the same seed gives
byte-identical sessions. Every other shape compacts once, at its end, with its
turn still open. Facts (`quality_builder.Fact`, nine kinds) have anchors
filler never contains (a per-session 4-hex suffix, or a number with a unit);
a superseded fact names the one that replaced it. Every third session also
records its next action as an exact continuation record (C8).

`spent_record_sessions` is the probe set of the spent rule (beyond C8,
`actors.compactor.ledger`): a next action recorded, run as a successful tool
call, then replaced by a plain-text plan, so the recorded command is stale.
"""

from __future__ import annotations

import random

from cairn.bench.quality_builder import WORDS, FactNames, Session, SessionBuilder
from cairn.events.model import ImagePart, TextPart

SEED = 20_261_203
SPENT_RECORD_SEED = 20_261_205
_Q_TASK = "Which function does the current task ask to change?"
_Q_NEXT = "What exact command is the pending next action?"
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


def _task(b: SessionBuilder, nm: FactNames) -> str:
    """Start a turn with a task and two constraints; the task's key."""
    text = (
        f"Task: change `{nm.func}` so that it will {nm.goal}.\n"
        f"Constraint: {nm.rule} `{nm.cls}`.\n"
        f"Constraint: the final answer must end with the line {nm.done}."
    )
    seq = b.start_turn(text)
    key = b.plant("task", (nm.func, nm.goal), seq, _Q_TASK, nm.func)
    b.plant("constraint", (nm.rule, nm.cls), seq, "Which class does the user's constraint protect?", nm.cls)
    b.plant("constraint", (nm.done,), seq, "Which exact line must the final answer end with?", nm.done)
    return key


def _identifier(b: SessionBuilder, nm: FactNames) -> None:
    out = f"wrote {nm.path} (+{b.rng.randrange(3, 40)} -{b.rng.randrange(1, 20)} lines)"
    seq = b.on_file("edit", nm.path, out, "Apply the change to the module.", "write")
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
    out = f"{b.code(10)}\n{nm.const} = {old}\n{b.code(10)}"
    seq = b.on_file("read", nm.path, out, "Read the current limit.")
    old_key = b.plant("number", (f"{nm.const} = {old}",), seq, "", str(old))
    b.filler(b.rng.randrange(2, 6))
    if by_user:
        seq = b.user((TextPart(f"Correction: set {nm.const} = {new}, the old value was too small."),))
    else:
        seq = b.on_file("edit", nm.path, f"wrote {nm.path}: {nm.const} = {new}", "Raise the limit.", "write")
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
    b.plant("next-action", (command,), seq, _Q_NEXT, command)


# -- the eight shapes: each follows the task (`build_session`), and returns the range of the filler
# steps after the pending next action that ends it


def _coding(b: SessionBuilder, nm: FactNames, task: str) -> tuple[int, int]:
    b.filler(b.rng.randrange(4, 9))
    _identifier(b, nm)
    b.filler(b.rng.randrange(3, 8))
    _decision(b, nm, nm.reasons[0])
    b.filler(b.rng.randrange(3, 8))
    _superseded_value(b, nm, by_user=False)
    _error_and_fix(b, nm, 2)
    _number(b, "p99 latency")
    b.filler(b.rng.randrange(3, 8))
    return 8, 14


def _debugging(b: SessionBuilder, nm: FactNames, task: str) -> tuple[int, int]:
    b.filler(b.rng.randrange(2, 5))
    hypothesis = _decision(b, nm, nm.reasons[0], choice=f"`{nm.cls}.retry`")
    _error_and_fix(b, nm, b.rng.randrange(4, 8))
    new = _decision(b, nm, nm.reasons[1], choice=f"`{nm.cls}.rebuild`")
    b.supersede(hypothesis, new)
    _identifier(b, nm)
    _number(b, "peak memory")
    return 8, 14


def _research(b: SessionBuilder, nm: FactNames, task: str) -> tuple[int, int]:
    numbers = {5: "max frame", 14: "median fetch", 22: "cache hit rate"}
    for i in range(b.rng.randrange(25, 40)):
        if i in numbers:
            _number(b, numbers[i])
        elif i == 10:
            _identifier(b, nm)
        elif b.keeps_filler_step(i):
            url = f"https://docs.example.org/{b.rng.choice(WORDS)}/{b.rng.choice(WORDS)}"
            if b.rng.random() < 0.4:
                fetched = b.prose(b.rng.randrange(200, 700))
                b.tool("web-fetch", f'{{"url": "{url}"}}', fetched, text=b.maybe_text())
            elif b.rng.random() < 0.6:
                b.read_filler()
            else:
                b.grep_filler()
    _superseded_value(b, nm, by_user=False)
    _decision(b, nm, nm.reasons[0])
    return 6, 10


def _task_change(b: SessionBuilder, nm: FactNames, task: str) -> tuple[int, int]:
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
    b.supersede(task, new_task)
    b.filler(b.rng.randrange(4, 8))
    _error_and_fix(b, nm, 2)
    _number(b, "throughput")
    return 8, 12


def _steering(b: SessionBuilder, nm: FactNames, task: str) -> tuple[int, int]:
    b.filler(b.rng.randrange(4, 8))
    seq = b.user((TextPart(f"Also: keep `{nm.cls2}` thread-safe while you are at it."),))
    b.plant("constraint", (nm.cls2, "thread-safe"), seq, "Which class must be kept thread-safe?", nm.cls2)
    _identifier(b, nm)
    _superseded_value(b, nm, by_user=True)
    _decision(b, nm, nm.reasons[0])
    _error_and_fix(b, nm, 2)
    return 8, 12


def _images(b: SessionBuilder, nm: FactNames, task: str) -> tuple[int, int]:
    for n in range(b.rng.randrange(2, 4)):
        value, route = _value(b.rng), f"/v2/{nm.mod}{n}_{nm.sfx}"
        caption = f"Screenshot of {b.rng.choice(_CAPTIONS)}: error rate {value} on route {route}"
        seq = b.user((TextPart(caption), ImagePart(data="iVBORw0KGgo" * 400)))
        question = f"What error rate did the screenshot show on {route}?"
        b.plant("number", (f"error rate {value}",), seq, question, value)
        b.say(f"The screenshot shows {b.prose(12)}.")
        b.filler(b.rng.randrange(2, 5))
    _identifier(b, nm)
    _decision(b, nm, nm.reasons[0])
    _error_and_fix(b, nm, 2)
    return 8, 12


def _huge_output(b: SessionBuilder, nm: FactNames, task: str) -> tuple[int, int]:
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
    return 8, 12


def _multi(b: SessionBuilder, nm: FactNames, task: str) -> tuple[int, int]:
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
    return 10, 16


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
KINDS = tuple(_SHAPES)


def build_session(kind: str, index: int, rng: random.Random, filler_scale: float = 1.0) -> Session:
    """The `index`-th session of `kind`, drawn from `rng`; `filler_scale` < 1 keeps that share of its
    filler steps (the same facts in a shorter session: the judge's own set)."""
    b = SessionBuilder(f"{kind}-{index}", rng, filler_scale=filler_scale)
    nm = FactNames(b)
    low, high = _SHAPES[kind](b, nm, _task(b, nm))
    _next_action(b, nm, record=index % 3 == 0)
    b.filler(b.rng.randrange(low, high))
    b.compact_here()
    return b.session(kind)


def corpus(per_kind: int, seed: int = SEED) -> list[Session]:
    """`per_kind` sessions of every kind (kinds interleaved), all drawn from one seeded generator."""
    rng = random.Random(seed)
    return [build_session(kind, i, rng) for i in range(per_kind) for kind in KINDS]


def spent_record_sessions(count: int, seed: int = SPENT_RECORD_SEED) -> list[Session]:
    rng = random.Random(seed)
    out = []
    for index in range(count):
        b = SessionBuilder(f"spent-record-{index}", rng)
        nm = FactNames(b)
        _task(b, nm)
        b.filler(b.rng.randrange(4, 8))
        done = f"pytest {nm.test} -k {nm.case}_first"
        seq = b.say(f"Next: run `{done}`.\nEXACT CONTINUATION RECORD [Exact next action] :: {done}")
        old = b.plant("next-action", (done,), seq, "", done)
        ran = f"===== {b.rng.randrange(5, 40)} passed ====="
        b.tool("bash", f'{{"cmd": "{done}"}}', ran, text="Run it.")
        b.filler(b.rng.randrange(3, 6))
        pending = f"pytest {nm.test} -k {nm.case}_second --maxfail=1"
        seq = b.say(f"Next: run `{pending}` once the fixture is regenerated.")
        b.supersede(old, b.plant("next-action", (pending,), seq, _Q_NEXT, pending))
        b.filler(b.rng.randrange(10, 14))
        b.compact_here()
        out.append(b.session("spent-record"))
    return out
