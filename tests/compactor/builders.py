"""Builders for compactor tests: sessions as real records folded with `events.state.replay`."""

from __future__ import annotations

import msgspec

from cairn.actors.compactor import CompactionConfig, CompactionRequest, Compactor
from cairn.actors.compactor.service import FileReader
from cairn.actors.provider.scripted import Outcome, ScriptedProvider
from cairn.actors.tokens import TokenCounter
from cairn.events.codec import GENESIS, Record
from cairn.events.kinds import (
    AssistantMessage,
    EventBase,
    FileAccess,
    SessionStarted,
    ToolResult,
    TurnStarted,
    UserMessage,
)
from cairn.events.model import ImagePart, Message, Part, TextPart, ToolCall, ToolStatus
from cairn.events.state import SessionState, replay

COUNTER = TokenCounter()


#: C7's seven headings, in order, stated literally (tests never take them from the ledger module)
C7_HEADINGS = (
    "Objective and constraints",
    "Decisions and rationale",
    "Workspace mutations",
    "Verification evidence",
    "Active tasks and background work",
    "Open risks or blockers",
    "Exact next action",
)


class Log:
    """A session's records, numbered the way the journal numbers them."""

    def __init__(self, sid: str = "s1", *, workspace: str = "/ws", window: int | None = 100_000) -> None:
        self.sid = sid
        self.records: list[Record] = []
        self._n = 0
        self.add(SessionStarted(workspace=workspace, model="m", context_window=window))

    def add(self, event: EventBase, ts: int | None = None) -> Record:
        seq = len(self.records) + 1
        record = Record(seq - 1, self.sid, seq, ts if ts is not None else 1000 * seq, GENESIS, event)  # type: ignore[arg-type]
        self.records.append(record)
        return record

    def _id(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    def user(self, text: str, *, images: int = 0) -> str:
        parts: list[Part] = [TextPart(text)]
        parts.extend(ImagePart(data="QUJD" * 50) for _ in range(images))
        mid = self._id("u")
        self.add(UserMessage(message_id=mid, content=tuple(parts)))
        return mid

    def turn(self, text: str) -> str:
        """A user message that opens a turn: its text becomes the active task (C11)."""
        mid = self.user(text)
        self.add(TurnStarted(turn_id=self._id("t"), message_id=mid))
        return mid

    def say(self, text: str) -> None:
        self.add(AssistantMessage(message_id=self._id("a"), request_id=self._id("r"), text=text))

    def tool(
        self,
        output: str,
        *,
        name: str = "read",
        text: str = "",
        files: tuple[FileAccess, ...] = (),
        ts: int | None = None,
        arguments: str = '{"path": "f.py"}',
        status: ToolStatus = "ok",
    ) -> str:
        call = ToolCall(id=self._id("c"), name=name, arguments=arguments)
        self.add(
            AssistantMessage(
                message_id=self._id("a"), request_id=self._id("r"), text=text, tool_calls=(call,)
            )
        )
        self.add(
            ToolResult(
                call_id=call.id,
                tool_name=name,
                status=status,
                effect="read",
                content=(TextPart(output),),
                files=files,
            ),
            ts=ts,
        )
        return call.id

    def state(self) -> SessionState:
        return replay(self.records)


def coding_session(rounds: int = 12, *, output_chars: int = 2000, log: Log | None = None) -> Log:
    log = log or Log()
    log.turn("Fix the failing test in tests/test_app.py and keep the public API unchanged.")
    for n in range(rounds):
        log.tool(f"line {n}: " + ("x" * 40 + "\n") * (output_chars // 41), text=f"Reading part {n}.")
        log.say(f"Step {n} done; next I will look at module {n + 1}.")
    return log


def compactor(
    *outcomes: Outcome,
    sleeps: list[float] | None = None,
    read_files: FileReader | None = None,
    config: CompactionConfig | None = None,
    hook=None,
) -> tuple[Compactor, ScriptedProvider]:
    provider = ScriptedProvider(outcomes)
    recorded = sleeps if sleeps is not None else []
    kwargs = {} if read_files is None else {"read_files": read_files}
    service = Compactor(
        provider,
        model="summary-model",
        sleep=recorded.append,
        counter=COUNTER,
        hook=hook,
        config=config,
        **kwargs,
    )
    return service, provider


def request(state: SessionState, *, workspace: str = "/ws", now_ms: int = 10**9, **kw) -> CompactionRequest:
    return CompactionRequest(state=state, workspace=workspace, trigger="threshold", now_ms=now_ms, **kw)


def fold(state_log: Log, events, ts: int) -> SessionState:
    """Persist `events` after the log's records (as the session would) and replay it all."""
    for event in events:
        state_log.add(event, ts=ts)
    return state_log.state()


def text(message: Message) -> str:
    assert isinstance(message.content, str)
    return message.content


def replace(obj, **changes):
    return msgspec.structs.replace(obj, **changes)


def ledger(
    objective: str = "- fix the failing test in tests/test_app.py",
    *,
    padding: int = 0,
    analysis: str = "fine",
) -> str:
    """A model's summary that follows C7: the seven headings in order, `objective` under the first
    (then `padding` filler lines, distinct and naming the session's test file: a summary repeating
    one line, or naming nothing of its source, is refused by the grounding gate), "No evidence
    observed." under the rest."""
    lines = [objective, *(f"- padding line {n} on tests/test_app.py" for n in range(padding))]
    sections = [f"## {C7_HEADINGS[0]}", *lines]
    for heading in C7_HEADINGS[1:]:
        sections += [f"## {heading}", "- No evidence observed."]
    body = "\n".join(sections)
    return f"<analysis>{analysis}</analysis>\n<summary>\n{body}\n</summary>"
