"""Reactive recovery (R1-R4) end to end: a context-limit error from the provider, and what follows."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from cairn.actors.compactor.checkpoint import source_hash, verify_checkpoint
from cairn.actors.compactor.errors import AuditMismatch
from cairn.actors.compactor.hooks import HookContext, HookVerdict
from cairn.actors.provider.base import TextDelta
from cairn.actors.provider.scripted import Fail, FailAfter, Reply, context_limit, http_error
from cairn.actors.session.recovery import reactive_snip
from cairn.actors.session.slimming import apply_plan
from cairn.actors.session.tracker import occupancy
from cairn.actors.session.view import HistoryView
from cairn.actors.tokens import TokenCounter
from cairn.events.kinds import CheckpointCommitted, CompactionFailed, ProviderError, Request, TurnFailed
from cairn.events.model import ToolCall
from cairn.events.state import replay
from tests.actors.helpers import WAIT, Seed, kinds, open_host, reopen_and_compare, scripted


def _seeded(tmp_path: Path, provider, **kwargs):  # type: ignore[no-untyped-def]
    host = open_host(tmp_path / "store", provider, **kwargs)
    seed = Seed(host.journal, "s", str(tmp_path))
    for _ in range(6):
        seed.turn(tools=[500])
    return host


def _events(host, kind):  # type: ignore[no-untyped-def]
    return [r for r in host.journal.read("s") if isinstance(r.event, kind)]


def test_R1_a_context_limit_is_known_by_status_or_message(tmp_path: Path) -> None:
    provider = scripted(
        Fail(
            error_class="bad-request",
            message="This model's maximum context length is 8192 tokens",
            status_code=400,
        ),
        Reply(text="after the first recovery", tool_calls=(ToolCall("x1", "read", '{"tokens": 5}'),)),
        Fail(error_class="server", message="Request Entity Too Large", status_code=413),
    )
    host = _seeded(tmp_path, provider)

    result = host.send("s", "go on").result(WAIT)

    assert result.ok  # both were recognised (one by message, one by status) and recovered
    checkpoints = _events(host, CheckpointCommitted)
    assert [c.event.trigger for c in checkpoints] == ["reactive", "reactive"]
    reopen_and_compare(host, tmp_path / "store", ["s"]).close()


def test_R1_other_errors_fail_the_turn_without_recovery(tmp_path: Path) -> None:
    provider = scripted(http_error(429), http_error(503))
    host = _seeded(tmp_path, provider, turn_retries=0)  # transient retries are tested in test_retry

    first = host.send("s", "go on").result(WAIT)
    second = host.send("s", "again").result(WAIT)

    assert (first.status, first.phase, first.error_class) == ("failed", "provider", "rate-limit")
    assert (second.phase, second.error_class) == ("provider", "server")
    assert _events(host, CheckpointCommitted) == []
    errors = [r.event for r in _events(host, ProviderError)]
    assert [e.status_code for e in errors] == [429, 503]
    reopen_and_compare(host, tmp_path / "store", ["s"]).close()


def test_R2_recovers_once_and_a_second_overflow_before_a_response_fails(tmp_path: Path) -> None:
    provider = scripted(context_limit(), context_limit())
    host = _seeded(tmp_path, provider)

    result = host.send("s", "go on").result(WAIT)

    assert result.status == "failed" and result.phase == "provider"
    assert result.error_class == "context-limit" and "(R2)" in result.error
    assert len(_events(host, CheckpointCommitted)) == 1  # recovered once, not twice
    requests = [r.event for r in _events(host, Request)]
    assert [r.attempt for r in requests] == [1, 2]
    assert host.state("s").carried.reactive_since_response  # the guard is in the log
    reopen_and_compare(host, tmp_path / "store", ["s"]).close()


def test_R2_the_guard_survives_replay_and_resets_at_a_response(tmp_path: Path) -> None:
    provider = scripted(context_limit(), context_limit())
    host = _seeded(tmp_path, provider)
    assert host.send("s", "go on").result(WAIT).phase == "provider"
    fresh = reopen_and_compare(
        host,
        tmp_path / "store",
        ["s"],
        provider=scripted(context_limit(), Reply(text="fine"), context_limit()),
    )

    # still no successful response since the reactive checkpoint: the guard holds after restart
    assert fresh.send("s", "once more").result(WAIT).phase == "provider"
    # a successful response clears it: the next overflow recovers again
    assert fresh.send("s", "and now").result(WAIT).ok
    assert not fresh.state("s").carried.reactive_since_response
    result = fresh.send("s", "last").result(WAIT)
    assert result.ok
    assert len([r for r in fresh.journal.read("s") if isinstance(r.event, CheckpointCommitted)]) == 2
    reopen_and_compare(fresh, tmp_path / "store", ["s"]).close()


def test_R2_an_error_after_output_fails_closed(tmp_path: Path) -> None:
    provider = scripted(FailAfter(failure=context_limit(), text="I was saying"))
    host = _seeded(tmp_path, provider)

    turn = host.send("s", "go on")
    seen = list(turn.events(timeout=WAIT))
    result = turn.result(WAIT)

    assert result.status == "failed" and result.phase == "provider" and "fails closed" in result.error
    assert any(isinstance(item, TextDelta) and item.text == "I was saying" for item in seen)
    error = _events(host, ProviderError)[0].event
    assert isinstance(error, ProviderError) and error.output_delivered
    assert _events(host, CheckpointCommitted) == []
    assert kinds(host.journal, "s")[-1] == "turn-failed"
    reopen_and_compare(host, tmp_path / "store", ["s"]).close()


def test_R3_recovery_strips_the_handoff_snips_and_commits_before_the_replay(tmp_path: Path) -> None:
    provider = scripted(context_limit())
    host = open_host(tmp_path / "store", provider)
    seed = Seed(host.journal, "s", str(tmp_path))
    for _ in range(13):
        seed.turn(user_tokens=800, tools=[100])

    result = host.send("s", "go on").result(WAIT)

    assert result.ok and result.requests == 2
    log = list(host.journal.read("s"))
    order = [
        r.line_kind
        for r in log
        if r.line_kind in ("handoff", "request", "provider-error", "checkpoint-committed")
    ]
    assert order == ["handoff", "request", "provider-error", "checkpoint-committed", "request"]
    checkpoint = next(r for r in log if isinstance(r.event, CheckpointCommitted))
    assert isinstance(checkpoint.event, CheckpointCommitted) and checkpoint.event.trigger == "reactive"
    before = replay(r for r in log if r.seq < checkpoint.seq)
    view = HistoryView(TokenCounter())
    snip = reactive_snip(before, view, occupancy(before, view))
    assert snip is not None and len(snip.event.removed_call_ids) == 10 - 3  # keep 3
    assert checkpoint.event.source_hash == source_hash(apply_plan(before, snip, now_ms=0).context)
    first, retried = [r for r in provider.requests if r.purpose == "turn"]
    assert first.messages[-1].meta.origin == "handoff"
    assert all(m.meta.origin != "handoff" for m in retried.messages)
    requests = [r.event for r in log if isinstance(r.event, Request)]
    assert [r.attempt for r in requests] == [1, 2] and not requests[1].handoff_included
    reopen_and_compare(host, tmp_path / "store", ["s"]).close()


def test_R3_when_compaction_gives_nothing_the_snip_result_is_the_replacement(tmp_path: Path) -> None:
    def hook(context: HookContext) -> HookVerdict | None:
        raise RuntimeError("the summary service is down")

    provider = scripted(context_limit())
    host = _seeded(tmp_path, provider, hook=hook)

    result = host.send("s", "go on").result(WAIT)

    assert result.ok
    checkpoint = _events(host, CheckpointCommitted)[0]
    event = checkpoint.event
    assert isinstance(event, CheckpointCommitted)
    assert event.trigger == "reactive" and event.diagnostics.failure_reason == "snip-only"
    before = replay(r for r in host.journal.read("s") if r.seq < checkpoint.seq)
    view = HistoryView(TokenCounter())
    snip = reactive_snip(before, view, occupancy(before, view))
    assert snip is not None
    assert event.replacement_messages == apply_plan(before, snip, now_ms=0).context
    # an auditor re-derives it from the source without a model, and notices tampering
    assert set(event.diagnostics.snipped_call_ids) == set(snip.event.removed_call_ids)
    verify_checkpoint(before.context, event, TokenCounter())
    fewer = snip.event.removed_call_ids[1:]
    forged = msgspec.structs.replace(
        event, diagnostics=msgspec.structs.replace(event.diagnostics, snipped_call_ids=fewer)
    )
    with pytest.raises(AuditMismatch):
        verify_checkpoint(before.context, forged, TokenCounter())
    reopen_and_compare(host, tmp_path / "store", ["s"]).close()


def test_R3_nothing_to_snip_and_no_compaction_fails_the_turn_with_the_original_error(
    tmp_path: Path,
) -> None:
    def hook(context: HookContext) -> HookVerdict | None:
        raise RuntimeError("the summary service is down")

    provider = scripted(context_limit("prompt is too long: 9100 tokens > 8192"))
    host = open_host(tmp_path / "store", provider, hook=hook)
    seed = Seed(host.journal, "s", str(tmp_path))
    seed.turn()

    result = host.send("s", "go on").result(WAIT)

    assert (result.status, result.phase, result.error_class) == ("failed", "provider", "context-limit")
    assert result.error.startswith("prompt is too long: 9100 tokens > 8192")
    assert "RuntimeError: the summary service is down" in result.error
    assert _events(host, CheckpointCommitted) == []
    reopen_and_compare(host, tmp_path / "store", ["s"]).close()


def test_R4_a_blocked_recovery_keeps_the_original_context(tmp_path: Path) -> None:
    def hook(context: HookContext) -> HookVerdict:
        return HookVerdict(block=True, reason="compliance hold")

    provider = scripted(context_limit())
    host = _seeded(tmp_path, provider, hook=hook)
    loaded = host.journal.load("s")

    result = host.send("s", "go on").result(WAIT)

    assert result.status == "failed" and result.phase == "compaction" and result.error_class == "blocked"
    assert _events(host, CheckpointCommitted) == []  # never a fallback checkpoint for a block
    state = host.state("s")
    assert state.context[: len(loaded.context)] == loaded.context
    assert state.revision == loaded.revision and state.epoch == loaded.epoch
    failed = [r.event for r in _events(host, TurnFailed)]
    assert failed[-1].phase == "compaction"
    reopen_and_compare(host, tmp_path / "store", ["s"]).close()


# --- a recovery that cannot shrink the context (beyond R3: no replacement larger than its source) ---

LONG_TASK = "Refactor the billing module exactly as this specification says. " * 90  # 5,850 chars


def test_R3_a_small_context_that_no_compaction_can_shrink_fails_with_the_original_error(
    tmp_path: Path,
) -> None:
    """The issue's case: a long request (under C11's 6,000 chars) and little history, rejected as
    too long. The fallback (notice + task reminder) would be larger than the context (647 -> 790 in
    the report): nothing is committed, and the turn fails with the provider's own error."""
    provider = scripted(context_limit("prompt is too long: 9100 tokens > 8192"))
    host = open_host(tmp_path / "store", provider)

    result = host.send("s", LONG_TASK, workspace=str(tmp_path)).result(WAIT)

    assert (result.status, result.phase, result.error_class) == ("failed", "provider", "context-limit")
    assert result.error.startswith("prompt is too long: 9100 tokens > 8192 (reactive recovery")
    assert "not smaller than its source" in result.error
    assert _events(host, CheckpointCommitted) == []
    failures = [r.event for r in _events(host, CompactionFailed)]
    assert [(f.trigger, f.reason) for f in failures] == [
        ("reactive", "insufficient-reduction"),
        ("reactive", "insufficient-reduction"),
    ]
    assert failures[1].detail.startswith("fallback:")
    state = host.state("s")
    assert state.revision == 0 and state.epoch == 0  # the context was never rewritten
    assert not state.carried.reactive_since_response  # no recovery happened, so R2's guard is not set
    (failed,) = [r.event for r in _events(host, TurnFailed)]
    assert (failed.phase, failed.error_class) == ("provider", "context-limit")
    reopen_and_compare(host, tmp_path / "store", ["s"]).close()


def test_R3_a_snip_that_would_grow_the_context_is_never_the_replacement(tmp_path: Path) -> None:
    """Tiny tool turns: snipping one adds an S1 marker larger than what it removes. With the
    compaction giving nothing, that snip result must not be committed as the snip-only checkpoint."""

    def hook(context: HookContext) -> HookVerdict | None:
        raise RuntimeError("the summary service is down")

    provider = scripted(context_limit())
    host = open_host(tmp_path / "store", provider, hook=hook)
    seed = Seed(host.journal, "s", str(tmp_path))
    seed.turn(user_tokens=1, tools=[1, 1, 1, 1], reply_tokens=1)
    before = host.journal.load("s")
    view = HistoryView(TokenCounter())
    snip = reactive_snip(before, view, occupancy(before, view))
    assert snip is not None  # the premise: R3's snip finds a candidate, and it would grow the context
    grown = apply_plan(before, snip, now_ms=0).context
    assert TokenCounter().messages(grown) >= TokenCounter().messages(before.context)

    result = host.send("s", "go on").result(WAIT)

    assert (result.status, result.phase, result.error_class) == ("failed", "provider", "context-limit")
    assert _events(host, CheckpointCommitted) == []
    assert "RuntimeError: the summary service is down" in result.error
    reopen_and_compare(host, tmp_path / "store", ["s"]).close()
