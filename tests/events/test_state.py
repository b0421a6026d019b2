"""The session fold: evolve == replay, checkpoint replay == full replay, slimming."""

from __future__ import annotations

from functools import reduce

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from cairn.events.codec import GENESIS, Record
from cairn.events.kinds import (
    AssistantMessage,
    CheckpointCommitted,
    CompactionFailed,
    ContextSlimmed,
    FileAccess,
    Handoff,
    Request,
    SessionStarted,
    ToolResult,
    TurnCompleted,
    TurnStarted,
    Usage,
    UserMessage,
)
from cairn.events.model import Message, TextPart, ToolCall
from cairn.events.state import SessionState, carried_for_checkpoint, evolve, replay


class Log:
    """Builds a session's records the way the journal would number them."""

    def __init__(self, sid: str = "s1") -> None:
        self.sid = sid
        self.records: list[Record] = []

    def add(self, event, ts: int | None = None) -> Record:
        seq = len(self.records) + 1
        record = Record(seq - 1, self.sid, seq, ts if ts is not None else 1000 * seq, GENESIS, event)
        self.records.append(record)
        return record


def _tool_turn(log: Log, n: int, *, status="ok", effect="read", name="read") -> None:
    call = ToolCall(id=f"c{n}", name=name, arguments='{"path": "f.py"}')
    log.add(AssistantMessage(message_id=f"a{n}", request_id=f"r{n}", tool_calls=(call,)))
    log.add(
        ToolResult(
            call_id=f"c{n}",
            tool_name=name,
            status=status,
            effect=effect,
            content=(TextPart(f"out {n}"),),
            files=(FileAccess(f"/w/f{n}.py", "read"),),
        )
    )


def _session() -> Log:
    log = Log()
    log.add(SessionStarted(workspace="/w", model="m", context_window=100_000))
    log.add(UserMessage(message_id="u1", content=(TextPart("fix the bug"),)))
    log.add(TurnStarted(turn_id="t1", message_id="u1"))
    log.add(
        Request(
            request_id="r1",
            turn_id="t1",
            attempt=1,
            fingerprint="f",
            history_revision=0,
            projected_tokens=50,
            phase="below_handoff",
            message_count=2,
            history_length=1,
        )
    )
    for n in range(1, 4):
        _tool_turn(log, n)
    log.add(Usage(request_id="r1", prompt_tokens=40, completion_tokens=10, total_tokens=50))
    log.add(UserMessage(message_id="u2", content=(TextPart("also run the tests"),)))
    return log


def test_evolve_and_replay_agree_on_every_prefix():
    log = _session()
    live = SessionState()
    for i, record in enumerate(log.records):
        live = evolve(live, record)
        assert live == replay(log.records[: i + 1])


def test_fold_builds_context_task_and_recent_files():
    state = replay(_session().records)
    assert [m.role for m in state.context] == ["user"] + ["assistant", "tool"] * 3 + ["user"]
    assert state.open_turn is not None and state.open_turn.task == ("fix the bug", "also run the tests")
    assert [f.path for f in state.carried.recent_files] == ["/w/f3.py", "/w/f2.py", "/w/f1.py"]
    assert state.last_usage is not None and state.last_usage.total_tokens == 50
    assert state.info is not None and state.info.workspace == "/w"


def test_P5_slimming_removes_whole_turns_inserts_marker_and_bumps_revision():
    log = _session()
    log.add(
        ContextSlimmed(
            mode="snip",
            removed_call_ids=("c1", "c2"),
            tokens_saved=20,
            marker_id="snip-1",
            marker_text="[2 earlier tool interactions were snipped]",
        )
    )
    state = replay(log.records)
    assert state.revision == 1
    assert [m.id or m.tool_call_id for m in state.context] == ["u1", "snip-1", "a3", "c3", "u2"]
    assert state.context[1].role == "system" and state.context[1].meta.origin == "snip-marker"


def test_K3_checkpoint_replay_equals_full_replay():
    log = _session()
    before = replay(log.records)
    checkpoint = CheckpointCommitted(
        version=1,
        epoch=1,
        through_seq=before.last_seq,
        trigger="threshold",
        strategy="llm",
        source_tokens=500,
        replacement_tokens=50,
        replacement_messages=(Message(role="user", content="<summary>", id="sum-1"),),
        carried=carried_for_checkpoint(before, reset_breaker=True),
    )
    cp = log.add(checkpoint)
    log.add(AssistantMessage(message_id="a9", request_id="r9", text="done"))
    log.add(TurnCompleted(turn_id="t1"))
    full = replay(log.records)
    from_checkpoint = replay([log.records[0], *log.records[cp.seq - 1 :]])
    assert full == from_checkpoint
    assert [m.id for m in full.context] == ["sum-1", "a9"]
    assert full.epoch == 1 and full.revision == 1 and full.open_turn is None


def test_handoffs_are_filed_per_epoch_and_cleared_by_a_checkpoint():
    log = _session()
    log.add(Handoff(epoch=0, record=msgspec.Raw(b'{"version":1}')))
    log.add(Handoff(epoch=7, record=msgspec.Raw(b'{"version":1}')))  # not the current epoch
    state = replay(log.records)
    assert len(state.epoch_handoffs) == 1


def test_compaction_failures_feed_the_breaker_but_blocks_do_not():
    log = _session()
    log.add(CompactionFailed(epoch=0, attempt=1, reason="error", consecutive_failures=1), ts=5_000)
    log.add(CompactionFailed(epoch=0, attempt=2, reason="blocked", consecutive_failures=9), ts=6_000)
    state = replay(log.records)
    assert state.carried.compaction_failures == 1
    assert state.carried.last_compaction_failure_ts == 5_000


def test_usage_for_another_request_is_not_the_baseline():
    log = _session()
    log.add(Usage(request_id="someone-else", total_tokens=99))
    assert replay(log.records).last_usage.request_id == "r1"


@given(st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=40))
def test_replay_is_a_fold_of_evolve(choices):
    log = Log()
    log.add(SessionStarted(workspace="/w", model="m"))
    for i, choice in enumerate(choices):
        if choice == 0:
            log.add(UserMessage(message_id=f"u{i}", content=(TextPart(f"msg {i}"),)))
        elif choice == 1:
            log.add(TurnStarted(turn_id=f"t{i}", message_id=f"u{i - 1}"))
        elif choice == 2:
            _tool_turn(log, i)
        elif choice == 3:
            log.add(ContextSlimmed(mode="micro", removed_call_ids=(f"c{i - 1}",), tokens_saved=1))
        elif choice == 4:
            log.add(
                Request(
                    request_id=f"r{i}",
                    turn_id="t",
                    attempt=1,
                    fingerprint="f",
                    history_revision=0,
                    projected_tokens=None,
                    phase="unknown",
                    message_count=1,
                )
            )
        else:
            log.add(Usage(request_id=f"r{i - 1}", total_tokens=i))
    assert replay(log.records) == reduce(evolve, log.records, SessionState())
