"""The quality corpus's building blocks: facts, sessions, and the seeded builder that writes their records.

`SessionBuilder` appends real log `Record`s, plants facts at the seqs that
carry them, marks compaction points and writes the filler around them (reads,
greps, test runs and edits of made-up code, from one seeded `random.Random`).
"""

from __future__ import annotations

import random
from typing import Literal, get_args

import msgspec
from msgspec.structs import replace

from cairn.events.codec import GENESIS, Record
from cairn.events.kinds import (
    AssistantMessage,
    EventBase,
    FileAccess,
    SessionStarted,
    ToolResult,
    TurnCompleted,
    TurnStarted,
    UserMessage,
)
from cairn.events.model import Part, TextPart, ToolCall, ToolEffect, ToolStatus

FactKind = Literal[
    "task", "constraint", "identifier", "decision", "error", "fix", "number", "next-action", "superseded"
]
FACT_KINDS: tuple[FactKind, ...] = get_args(FactKind)
WORKSPACE = "/bench/ws"
#: filler words of the generated sessions (the long runs use its first 25)
WORDS = (  # noqa: SIM905 (35 words read better as text than one a line)
    "parser module config retry cache index token buffer handler schema request session journal segment "
    "offset commit replay checkpoint summary budget window fixture value payload record entry frame reader "
    "writer stream queue worker state event field"
).split()
_CODE = (
    "def {a}_{b}(self, {b}):",
    "    {a} = self.{b}.get({b!r})",
    "    if not {a}:",
    "        return {b}",
    "class {A}{B}:",
    "    # {prose}",
    "    self.{a}.append({b})",
    "",
)


class Fact(msgspec.Struct, frozen=True):
    """One planted fact: its kind, the strings that carry it, and the log seq that planted it.

    A superseded fact names the fact that replaced it (`replaced_by`) and asks
    its question, answered with the old value; `answer` is the string a right
    answer to the judge's `question` contains.
    """

    key: str
    kind: FactKind
    anchors: tuple[str, ...]
    seq: int
    replaced_by: str = ""
    question: str = ""
    answer: str = ""


class Session(msgspec.Struct, frozen=True):
    """One generated session: its records, the seqs a compaction runs right after, its planted facts."""

    name: str
    kind: str
    records: tuple[Record, ...]
    compact_after: tuple[int, ...]
    facts: tuple[Fact, ...]


class SessionBuilder:
    """Appends events as records and remembers the facts they plant; `filler_scale` < 1 keeps that
    share of the filler steps (the judge's shorter sessions, same facts)."""

    words = WORDS

    def __init__(
        self, name: str, rng: random.Random, window: int = 200_000, filler_scale: float = 1.0
    ) -> None:
        self.name = name
        self.rng = rng
        self.filler_scale = filler_scale
        self.records: list[Record] = []
        self.facts: dict[str, Fact] = {}
        self.compact_after: list[int] = []
        self.turn: str | None = None
        self.n = 0
        self.add(SessionStarted(workspace=WORKSPACE, model="bench", context_window=window))

    def add(self, event: EventBase) -> int:
        seq = len(self.records) + 1
        self.records.append(Record(seq - 1, self.name, seq, 1000 * seq, GENESIS, event))  # type: ignore[arg-type]
        return seq

    def ident(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def start_turn(self, text: str) -> int:
        if self.turn is not None:
            self.add(TurnCompleted(turn_id=self.turn, requests=1))
        mid = self.ident("u")
        seq = self.add(UserMessage(message_id=mid, content=(TextPart(text),)))
        self.turn = self.ident("t")
        self.add(TurnStarted(turn_id=self.turn, message_id=mid))
        return seq

    def user(self, parts: tuple[Part, ...]) -> int:
        """A user message inside the open turn (steering: it joins the turn's task)."""
        return self.add(UserMessage(message_id=self.ident("u"), content=parts))

    def say(self, text: str) -> int:
        return self.add(AssistantMessage(message_id=self.ident("a"), request_id=self.ident("r"), text=text))

    def tool(
        self,
        name: str,
        arguments: str,
        output: str,
        *,
        text: str = "",
        status: ToolStatus = "ok",
        effect: ToolEffect = "read",
        path: str | None = None,
    ) -> int:
        """One tool turn: the assistant's call (with `text`), then its result; the result's seq."""
        call = ToolCall(self.ident("c"), name, arguments)
        mid, rid = self.ident("a"), self.ident("r")
        self.add(AssistantMessage(message_id=mid, request_id=rid, text=text, tool_calls=(call,)))
        files = (FileAccess(path, "write" if effect == "write" else "read"),) if path else ()
        content = (TextPart(output),)
        result = ToolResult(
            call_id=call.id, tool_name=name, status=status, effect=effect, content=content, files=files
        )
        return self.add(result)

    def plant(self, kind: FactKind, anchors: tuple[str, ...], seq: int, question: str, answer: str) -> str:
        key = f"{kind}-{len(self.facts)}"
        self.facts[key] = Fact(key, kind, anchors, seq, question=question, answer=answer)
        return key

    def supersede(self, old: str, new: str) -> None:
        """Fact `old` was replaced by `new`: it becomes a superseded fact asking the new one's question."""
        question = self.facts[new].question
        self.facts[old] = replace(self.facts[old], kind="superseded", replaced_by=new, question=question)

    def compact_here(self) -> None:
        self.compact_after.append(len(self.records))

    def session(self, kind: str) -> Session:
        facts = tuple(self.facts.values())
        return Session(self.name, kind, tuple(self.records), tuple(self.compact_after), facts)

    # -- filler (the order of the rng's draws is the corpus: changing it changes every session) --

    def prose(self, words: int) -> str:
        return " ".join(self.rng.choice(self.words) for _ in range(words))

    def code(self, lines: int) -> str:
        out = []
        for i in range(lines):
            a, b = self.rng.choice(WORDS), self.rng.choice(WORDS)
            if i == 0:
                out.append(f'"""{self.prose(8)}."""')
            else:
                prose = self.prose(6)
                out.append(self.rng.choice(_CODE).format(a=a, b=b, A=a.title(), B=b.title(), prose=prose))
        return "\n".join(out)

    def filler_path(self) -> str:
        return f"src/app/{self.rng.choice(WORDS)}_{self.rng.choice(WORDS)}.py"

    def on_file(self, name: str, path: str, output: str, text: str, effect: ToolEffect = "read") -> int:
        return self.tool(name, f'{{"path": "{path}"}}', output, text=text, effect=effect, path=path)

    def read_filler(self) -> int:
        path = self.filler_path()
        return self.on_file("read", path, self.code(self.rng.randrange(40, 160)), self.maybe_text())

    def grep_filler(self) -> int:
        word = self.rng.choice(WORDS)
        hits = "\n".join(
            f"{self.filler_path()}:{self.rng.randrange(1, 400)}: {self.prose(7)}" for _ in range(12)
        )
        return self.tool("grep", f'{{"pattern": "{word}"}}', hits, text=self.maybe_text())

    def test_filler(self) -> int:
        count = self.rng.randrange(5, 60)
        lines = [
            f"tests/test_{self.rng.choice(WORDS)}.py ....{'.' * self.rng.randrange(1, 9)}" for _ in range(6)
        ]
        lines.append(f"===== {count} passed =====")
        return self.tool("bash", '{"cmd": "pytest -q"}', "\n".join(lines), text=self.maybe_text())

    def edit_filler(self) -> int:
        path = self.filler_path()
        return self.on_file("edit", path, f"edited {path}: {self.prose(10)}", self.maybe_text(), "write")

    def maybe_text(self) -> str:
        return self.prose(self.rng.randrange(6, 20)).capitalize() + "." if self.rng.random() < 0.6 else ""

    def keeps_filler_step(self, i: int) -> bool:
        """Whether the `i`-th filler step of a loop stays at this builder's scale (evenly spread)."""
        return int((i + 1) * self.filler_scale) > int(i * self.filler_scale)

    def filler(self, steps: int) -> None:
        for _ in range(round(steps * self.filler_scale)):
            pick = self.rng.random()
            if pick < 0.45:
                self.read_filler()
            elif pick < 0.65:
                self.grep_filler()
            elif pick < 0.85:
                self.edit_filler()
            else:
                self.test_filler()


# -- the names a session's facts use ------------------------------------------------------------

_MODULES = ("ledger", "journal", "budget", "segment", "lease", "replay", "index", "router", "cache")
_VERBS = ("validate", "normalize", "flush", "resolve", "encode", "split", "merge", "rotate")
_GOALS = (
    "reject empty frames",
    "keep the byte order stable",
    "return the reserve in tokens",
    "stop reading past the last commit",
    "count images once",
    "retry only idempotent calls",
    "drop stale leases on restart",
    "report the first bad offset",
)
_RULES = (
    "do not change the on-disk format of",
    "keep the public signature of",
    "add no new dependency to",
    "never call the network from",
    "keep thread safety of",
)
_REASONS = (
    "the fsync per batch dominates the write path",
    "the lease can expire while replay runs",
    "msgspec decodes the envelope without a copy",
    "the old index cannot be rebuilt from the log",
    "the provider reuses call ids across turns",
    "an image would otherwise count its base64 length",
    "the segment header already carries the length",
    "a second lock would invert the acquisition order",
)
_ERRORS = ("KeyError", "ValueError", "AssertionError", "TypeError", "IndexError")


class FactNames:
    """The per-session names facts use; every one carries the session's suffix (the first draw of a
    session's rng)."""

    def __init__(self, b: SessionBuilder) -> None:
        rng = b.rng
        self.sfx = s = f"{rng.randrange(16**4):04x}"
        self.mod = rng.choice(_MODULES)
        self.func = f"{rng.choice(_VERBS)}_{self.mod}_{s}"
        self.func2 = f"{rng.choice(_VERBS)}_{rng.choice(_MODULES)}_{s}b"
        self.cls = f"{self.mod.title()}Index{s.upper()}"
        self.cls2 = f"{rng.choice(_MODULES).title()}Reader{s.upper()}"
        self.path = f"src/cairn_{self.mod}/{self.mod}_{s}.py"
        self.test = f"tests/test_{self.mod}_{s}.py"
        self.const = f"{self.mod.upper()}_LIMIT_{s.upper()}"
        self.case = f"{rng.choice(WORDS)}_{s}"
        self.goal = rng.choice(_GOALS)
        self.goal2 = rng.choice([g for g in _GOALS if g != self.goal])
        self.rule = rng.choice(_RULES)
        self.reasons = rng.sample(_REASONS, 3)
        self.error = f"{rng.choice(_ERRORS)}: 'seg_{s}'"
        self.done = f"DONE-{s}"
