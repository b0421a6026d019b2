"""A session's prompt-cache account from its events: the hit ratio and the decisions that broke a prefix."""

from __future__ import annotations

from cairn.actors.session.cache_account import CacheAccount, cache_account
from cairn.events.codec import GENESIS, Record
from cairn.events.kinds import (
    AssistantMessage,
    CheckpointCommitted,
    ContextSlimmed,
    EventBase,
    Request,
    ToolResult,
    Usage,
    UserMessage,
)
from cairn.events.model import Message, MessageMeta, TextPart, ToolCall


class Log:
    """A session's events with gap-free seqs."""

    def __init__(self) -> None:
        self.records: list[Record] = []

    def add(self, *events: EventBase) -> None:
        for event in events:
            seq = len(self.records) + 1
            self.records.append(Record(seq - 1, "s", seq, seq, GENESIS, event))  # type: ignore[arg-type]

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
        kept = Message(role="assistant", tool_calls=tuple(ToolCall(call, "read") for call in kept_calls))
        results = tuple(Message(role="tool", content="ok", tool_call_id=call) for call in kept_calls)
        summary = Message(role="user", content="the ledger", meta=MessageMeta(origin="summary"))
        self.add(
            CheckpointCommitted(
                version=1,
                epoch=1,
                through_seq=len(self.records),
                trigger="threshold",
                strategy="llm",
                source_tokens=100,
                replacement_tokens=10,
                replacement_messages=(summary, kept, *results) if kept_calls else (summary,),
            )
        )

    def account(self) -> CacheAccount:
        return cache_account(self.records)


def test_the_hit_ratio_is_cache_reads_over_the_whole_prompts_that_reported_them() -> None:
    log = Log()
    log.add(
        Usage(request_id="r1", prompt_tokens=7_100, completion_tokens=50, cached_prompt_tokens=5_000),
        Usage(request_id="r2", prompt_tokens=7_300, cached_prompt_tokens=7_100, cache_write_tokens=200),
        Usage(request_id="r3", prompt_tokens=100, cached_prompt_tokens=5_000, cache_write_tokens=2_000),
        Usage(request_id="r4", prompt_tokens=9_999),  # no cache figure: left out of the ratio
    )
    account = log.account()
    assert (account.cache_reports, account.prompt_tokens) == (3, 21_500)  # 7,100 + 7,300 + 7,100
    assert (account.cache_read_tokens, account.cache_write_tokens) == (17_100, 2_200)
    assert account.hit_ratio is not None and round(account.hit_ratio, 4) == 0.7953


def test_no_cache_figure_means_no_ratio() -> None:
    log = Log()
    log.add(Usage(request_id="r1", prompt_tokens=100, completion_tokens=5, cached_prompt_tokens=None))
    assert log.account().hit_ratio is None
    assert Log().account() == CacheAccount()
    log.add(Usage(request_id="r2", prompt_tokens=0, cached_prompt_tokens=0))
    assert log.account().hit_ratio == 0.0


def test_a_slimming_of_calls_an_answered_request_sent_breaks_the_prefix() -> None:
    log = Log()
    log.add(UserMessage(message_id="u1", content=(TextPart("go"),)))
    log.request("r1")
    log.answer("r1", "c1")
    log.request("r2")
    log.answer("r2", "c2")
    log.request("r3")
    log.answer("r3")
    log.slim("c1")
    assert (log.account().breaks_by_slimming, log.account().breaks) == (1, 1)
    log.slim("c2")  # a second decision before the next request breaks it again
    assert log.account().breaks_by_slimming == 2


def test_a_slimming_of_calls_no_answered_request_sent_breaks_nothing() -> None:
    log = Log()
    log.request("r1")
    log.answer("r1", "c1")
    log.slim("c1")  # c1 came with r1's answer: no answered request sent it
    log.request("r2")  # not answered (a provider error)
    log.slim("c1")
    assert log.account().breaks == 0
    log.answer("r2")
    log.slim("c1")
    assert log.account().breaks == 1


def test_a_checkpoint_breaks_the_prefix_of_an_answered_request_of_its_epoch() -> None:
    log = Log()
    log.request("r1")
    log.answer("r1", "c1", "c2")
    log.checkpoint("c2")
    assert (log.account().breaks_by_checkpoint, log.account().breaks_by_slimming) == (1, 0)
    log.checkpoint("c2")  # nothing was sent on the first checkpoint's history
    log.slim("c2")
    assert log.account().breaks == 1
    log.request("r2")
    log.answer("r2")
    log.slim("c2")  # carried by the checkpoint, sent by r2
    log.checkpoint()
    account = log.account()
    assert (account.breaks_by_slimming, account.breaks_by_checkpoint, account.breaks) == (1, 2, 3)


def test_a_removed_call_never_seen_counts_as_sent() -> None:
    log = Log()
    log.request("r1")
    log.answer("r1")
    log.slim("from-before-the-log-read")
    assert log.account().breaks_by_slimming == 1
