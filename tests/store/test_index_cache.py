"""The prompt-cache account in a session's index summary: cache figures, and decisions that broke a prefix.

Events go through a real journal; the summary is read back from its LMDB
index, and a reindex from the log gives the same.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn.events.kinds import (
    AssistantMessage,
    CheckpointCommitted,
    ContextSlimmed,
    EventBase,
    Request,
    SessionStarted,
    ToolResult,
    Usage,
)
from cairn.events.model import Message, MessageMeta, ToolCall
from cairn.store import Journal
from cairn.store.index_records import SessionSummary
from cairn.store.reindex import reindex


class Log:
    """One session's events, appended to a real journal as they are added."""

    def __init__(self, journal: Journal, *, start: bool = True) -> None:
        self.journal = journal
        if start:
            self.add(SessionStarted(workspace="/w", model="m"))

    def add(self, *events: EventBase) -> None:
        self.journal.append("s", list(events), expected_seq=self.journal.last_seq("s"))

    def request(self, request_id: str) -> None:
        self.add(
            Request(
                request_id=request_id,
                turn_id="t",
                attempt=1,
                fingerprint="f",
                history_revision=0,
                projected_tokens=None,
                phase="below_handoff",
                message_count=1,
            )
        )

    def answer(self, request_id: str, *calls: str) -> None:
        tool_calls = tuple(ToolCall(call, "read") for call in calls)
        self.add(AssistantMessage(message_id=f"a{request_id}", request_id=request_id, tool_calls=tool_calls))
        for call in calls:
            self.add(ToolResult(call_id=call, tool_name="read", status="ok", effect="read", content=()))

    def slim(self, *calls: str) -> None:
        self.add(ContextSlimmed(mode="snip", removed_call_ids=calls, tokens_saved=10))

    def checkpoint(self, *kept_calls: str) -> None:
        summary = Message(role="user", content="the ledger", meta=MessageMeta(origin="summary"))
        kept = Message(role="assistant", tool_calls=tuple(ToolCall(call, "read") for call in kept_calls))
        results = tuple(Message(role="tool", content="ok", tool_call_id=call) for call in kept_calls)
        self.add(
            CheckpointCommitted(
                version=1,
                epoch=1,
                through_seq=self.journal.last_seq("s"),
                trigger="threshold",
                strategy="llm",
                source_tokens=100,
                replacement_tokens=10,
                replacement_messages=(summary, kept, *results) if kept_calls else (summary,),
            )
        )

    def summary(self) -> SessionSummary:
        summary = self.journal.session("s")
        assert summary is not None
        return summary

    def breaks(self) -> tuple[int, int]:
        summary = self.summary()
        return summary.cache_breaks_by_slimming, summary.cache_breaks_by_checkpoint


@pytest.fixture
def log(tmp_path: Path) -> Iterator[Log]:
    with Journal.open(tmp_path / "store") as journal:
        yield Log(journal)


def test_cache_figures_sum_the_usage_events_that_reported_reads(log: Log) -> None:
    log.add(
        Usage(request_id="r1", prompt_tokens=7_100, completion_tokens=50, cached_prompt_tokens=5_000),
        Usage(request_id="r2", prompt_tokens=7_300, cached_prompt_tokens=7_100, cache_write_tokens=200),
        Usage(request_id="r3", prompt_tokens=100, cached_prompt_tokens=5_000, cache_write_tokens=2_000),
        Usage(request_id="r4", prompt_tokens=9_999, cache_write_tokens=1),  # no reads: no cache report
    )
    summary = log.summary()
    assert summary.cache_reports == 3
    assert summary.cache_prompt_tokens == 21_500  # 7,100 + 7,300 + (100 + 5,000 + 2,000)
    assert (summary.cache_read_tokens, summary.cache_write_tokens) == (17_100, 2_200)
    assert summary.prompt_tokens == 24_499  # the plain sum of prompt_tokens, as before


def test_a_slimming_after_an_answered_request_breaks_the_prefix(log: Log) -> None:
    log.request("r1")
    log.answer("r1", "c1")
    log.slim("c1")  # c1 came with r1's answer: a slimming never removes the newest turn, but
    # the count does not look at which call: r1 was answered, so its prefix was cached
    assert log.breaks() == (1, 0)
    log.slim("c1")  # a second decision before the next request counts again
    log.slim()  # one that removed nothing breaks nothing
    assert log.breaks() == (2, 0)


def test_nothing_breaks_before_a_request_of_the_epoch_is_answered(log: Log) -> None:
    log.answer("r0", "c0")  # a reply to no request of this log
    log.slim("c0")
    log.request("r1")  # not answered (a provider error)
    log.slim("c0")
    assert log.breaks() == (0, 0)
    log.answer("r1")
    log.slim("c0")
    assert log.breaks() == (1, 0)


def test_a_checkpoint_breaks_the_prefix_of_an_answered_request_of_its_epoch(log: Log) -> None:
    log.request("r1")
    log.answer("r1", "c1", "c2")
    log.checkpoint("c2")
    assert log.breaks() == (0, 1)
    log.checkpoint("c2")  # nothing was sent on the first checkpoint's history
    log.slim("c2")
    assert log.breaks() == (0, 1)
    log.request("r2")
    log.checkpoint()
    assert log.breaks() == (0, 1)  # r2 was never answered
    log.request("r3")
    log.answer("r3")
    log.slim("c2")
    log.checkpoint()
    assert log.breaks() == (1, 2)


def test_a_reindex_rebuilds_the_same_account(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with Journal.open(root) as journal:
        log = Log(journal)
        log.request("r1")
        log.answer("r1", "c1")
        log.add(
            Usage(request_id="r1", prompt_tokens=7_100, cached_prompt_tokens=5_000, cache_write_tokens=2_000)
        )
        log.request("r2")  # the head's running state is left mid-epoch, unanswered
        before = log.summary()
    reindex(root)
    with Journal.open(root) as journal:
        again = Log(journal, start=False)
        assert again.summary() == before
        again.answer("r2")
        again.slim("c1")
        assert again.breaks() == (1, 0)  # the running state came back with the summary
    assert (before.cache_request_id, before.cache_answered, before.cache_write_tokens) == ("r2", True, 2_000)
