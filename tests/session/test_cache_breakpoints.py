"""Where a request may put prompt-cache breakpoints: after the summary and at the newest message."""

from __future__ import annotations

from cairn.actors.session.cache_breakpoints import cache_breakpoints
from cairn.actors.session.request import assemble
from cairn.events.model import Message, MessageMeta
from tests.session.builders import Session, new_view

SYSTEM = Message(role="system", content="You are a careful coding agent.")
SUMMARY = Message(role="user", content="the ledger", meta=MessageMeta(origin="summary"))
FALLBACK = Message(role="user", content="compaction failed", meta=MessageMeta(origin="fallback-summary"))
HANDOFF = Message(role="user", content="rollover is near", meta=MessageMeta(hidden=True, origin="handoff"))
TASK = Message(role="user", content="the task", meta=MessageMeta(hidden=True, origin="active-task"))


def _user(text: str) -> Message:
    return Message(role="user", content=text)


def _assistant(text: str) -> Message:
    return Message(role="assistant", content=text)


def test_no_history_has_no_breakpoint() -> None:
    assert cache_breakpoints((SYSTEM,), history_start=1) == ()
    assert cache_breakpoints((), history_start=0) == ()
    assert cache_breakpoints((SYSTEM, HANDOFF), history_start=1) == ()


def test_without_a_checkpoint_only_the_newest_message() -> None:
    messages = (SYSTEM, _user("a"), _assistant("b"), _user("c"))
    assert cache_breakpoints(messages, history_start=1) == (3,)
    assert cache_breakpoints(messages[1:], history_start=0) == (2,)  # no system prompt


def test_after_a_checkpoint_its_summary_and_the_newest_message() -> None:
    messages = (SYSTEM, SUMMARY, _user("tail"), TASK, _assistant("b"), _user("c"))
    assert cache_breakpoints(messages, history_start=1) == (1, 5)
    assert cache_breakpoints((SYSTEM, FALLBACK, _user("c")), history_start=1) == (1, 2)
    assert cache_breakpoints((SYSTEM, SUMMARY), history_start=1) == (1,)  # one message, one breakpoint


def test_a_summary_not_at_the_start_of_history_is_no_breakpoint() -> None:
    assert cache_breakpoints((SYSTEM, _user("a"), SUMMARY, _user("c")), history_start=1) == (3,)


def test_the_trailing_handoff_is_skipped_for_the_message_under_it() -> None:
    messages = (SYSTEM, SUMMARY, _user("a"), _assistant("b"), HANDOFF)
    assert cache_breakpoints(messages, history_start=1) == (1, 3)
    assert cache_breakpoints((SYSTEM, _user("a"), HANDOFF), history_start=1) == (1,)


def test_assemble_gives_the_breakpoints_of_the_messages_it_sends() -> None:
    session = Session()
    session.user("fix the failing test")
    session.assistant("Looking at it.")
    session.user("and the lint")
    view = new_view()
    assembled = assemble(session.state, view)
    assert [m.role for m in assembled.messages] == ["system", "user", "assistant", "user"]
    assert assembled.cache_breakpoints == (3,)
    session.checkpoint((SUMMARY, _user("and the lint")))
    assembled = assemble(session.state, view)
    assert assembled.cache_breakpoints == (1, 2)
