"""A session log built event by event, folded live with `evolve` as the actor would."""

from __future__ import annotations

from cairn.actors.session.request import assemble, request_event
from cairn.actors.session.view import HistoryView
from cairn.actors.tokens import TokenCounter
from cairn.events.codec import GENESIS, Record
from cairn.events.kinds import (
    AssistantMessage,
    CheckpointCommitted,
    EventBase,
    Request,
    SessionStarted,
    ToolResult,
    Usage,
    UserMessage,
)
from cairn.events.model import Message, Part, TextPart, ToolCall
from cairn.events.state import SessionState, carried_for_checkpoint, evolve

_counter: TokenCounter | None = None


def counter() -> TokenCounter:
    """One real counter for the whole test run (the encoder loads once per process)."""
    global _counter
    if _counter is None:
        _counter = TokenCounter()
    return _counter


def new_view() -> HistoryView:
    return HistoryView(counter())


class Session:
    """Records with gap-free seqs, and the state folded live after each one."""

    def __init__(
        self,
        sid: str = "s1",
        *,
        window: int | None = 110_000,
        cap: int | None = 10_000,
        model: str = "model-a",
        system_prompt: str = "You are a careful coding agent.",
        tools: tuple[str, ...] = ('{"name":"read","parameters":{}}',),
        read_only: tuple[str, ...] | None = None,
        start_ts: int = 1_000_000,
    ) -> None:
        self.sid = sid
        self.records: list[Record] = []
        self.state = SessionState()
        self.ts = start_ts
        self.calls = 0
        self.add(
            SessionStarted(
                workspace="/work/repo",
                model=model,
                context_window=window,
                max_output_tokens=cap,
                system_prompt=system_prompt,
                tool_schemas=tools,
                read_only_tools=read_only,
            )
        )

    def add(self, event: EventBase, *, ts: int | None = None) -> Record:
        self.ts = ts if ts is not None else self.ts + 1_000
        seq = self.state.last_seq + 1
        record = Record(len(self.records), self.sid, seq, self.ts, GENESIS, event)  # type: ignore[arg-type]
        self.records.append(record)
        self.state = evolve(self.state, record)
        return record

    def user(self, text: str, message_id: str | None = None) -> None:
        ident = message_id or f"u{self.state.last_seq + 1}"
        self.add(UserMessage(message_id=ident, content=(TextPart(text),)))

    def assistant(self, text: str = "ok", request_id: str = "r") -> None:
        self.add(AssistantMessage(message_id=f"a{self.state.last_seq + 1}", request_id=request_id, text=text))

    def tool_turn(
        self,
        *,
        name: str = "read",
        status: str = "ok",
        effect: str = "read",
        output: str | tuple[Part, ...] = "file contents",
        calls: int = 1,
        text: str = "",
        answered: int | None = None,
        call_ids: tuple[str, ...] | None = None,
    ) -> tuple[str, ...]:
        """An assistant message with `calls` tool calls and `answered` (default all) results."""
        ids = call_ids or tuple(f"c{self.calls + i}" for i in range(calls))
        self.calls += len(ids)
        tool_calls = tuple(ToolCall(call_id, name, '{"path": "src/app.py"}') for call_id in ids)
        self.add(
            AssistantMessage(
                message_id=f"a{self.state.last_seq + 1}", request_id="r", text=text, tool_calls=tool_calls
            )
        )
        content = (TextPart(output),) if isinstance(output, str) else output
        for call_id in ids[: len(ids) if answered is None else answered]:
            self.add(
                ToolResult(
                    call_id=call_id,
                    tool_name=name,
                    status=status,  # type: ignore[arg-type]
                    effect=effect,  # type: ignore[arg-type]
                    content=content,
                )
            )
        return ids

    def request(self, view: HistoryView, request_id: str, *, model: str | None = None) -> Request:
        """Assemble the next request and record its `request` event."""
        assembled = assemble(self.state, view, model=model)
        event = request_event(assembled, request_id=request_id, turn_id="t1")
        self.add(event)
        return event

    def usage(self, request_id: str, prompt: int | None, completion: int | None, total: int | None) -> None:
        usage = Usage(
            request_id=request_id, prompt_tokens=prompt, completion_tokens=completion, total_tokens=total
        )
        self.add(usage)

    def checkpoint(self, replacement: tuple[Message, ...]) -> None:
        self.add(
            CheckpointCommitted(
                version=1,
                epoch=self.state.epoch + 1,
                through_seq=self.state.last_seq,
                trigger="threshold",
                strategy="fallback",
                source_tokens=1,
                replacement_tokens=1,
                replacement_messages=replacement,
                carried=carried_for_checkpoint(self.state, reset_breaker=False),
            )
        )


def summary_message(text: str = "summary of earlier work") -> Message:
    return Message(role="user", content=text, id="summary-1")
