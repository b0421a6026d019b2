"""The circuit breaker (C4): derived from compaction-failed events, per workspace, half-open."""

from __future__ import annotations

from cairn.actors.compactor import CompactionConfig, breaker_view
from cairn.actors.compactor.breaker import breaker_key
from cairn.actors.provider.scripted import Auto, Reply
from cairn.events.kinds import CompactionFailed
from tests.compactor.builders import Log, coding_session, compactor, fold, ledger, request

BLOATED = ledger(padding=15000)
MINUTE = 60_000


def _grow(log: Log, rounds: int = 10) -> None:
    for n in range(rounds):
        log.tool(f"more output {n} " + "z" * 3000)
        log.say(f"continuing {n}")


def test_C4_three_insufficient_reductions_open_the_breaker_and_the_fourth_calls_no_model() -> None:
    log = coding_session(12)
    service, provider = compactor(Reply(text=BLOATED), Reply(text=BLOATED), Reply(text=BLOATED))
    now = 10**9
    for expected in (1, 2, 3):
        outcome = service.compact(request(log.state(), now_ms=now))
        assert outcome.failure is not None and outcome.failure.reason == "insufficient-reduction"
        assert outcome.failure.consecutive_failures == expected
        assert outcome.checkpoint.carried.compaction_failures == expected
        fold(log, outcome.events, ts=now)
        _grow(log)
        now += MINUTE
    assert provider.calls == 3
    outcome = service.compact(request(log.state(), now_ms=now))
    assert provider.calls == 3  # the fourth compaction never reached the model
    assert outcome.breaker.mode == "open"
    assert outcome.strategy == "fallback" and outcome.failure is None
    assert outcome.checkpoint.diagnostics.failure_reason == "breaker-open"
    assert outcome.checkpoint.carried.compaction_failures == 3


def test_C4_half_open_after_the_cooldown_and_success_resets() -> None:
    log = coding_session(12)
    start = 10**9
    for n in (1, 2, 3):
        log.add(CompactionFailed(epoch=0, attempt=1, reason="empty", consecutive_failures=n), ts=start)
    service, provider = compactor(Auto(), config=CompactionConfig())  # the default cooldown: 10 minutes
    early = service.compact(request(log.state(), now_ms=start + 10 * MINUTE - 1))
    assert early.breaker.mode == "open" and provider.calls == 0
    late = service.compact(request(log.state(), now_ms=start + 10 * MINUTE))
    assert late.breaker.mode == "half-open" and provider.calls == 1
    assert late.strategy == "llm"
    assert late.checkpoint.carried.compaction_failures == 0


def test_C4_a_failed_half_open_trial_reopens_for_another_cooldown() -> None:
    log = coding_session(12)
    start = 10**9
    for n in (1, 2, 3):
        log.add(CompactionFailed(epoch=0, attempt=1, reason="empty", consecutive_failures=n), ts=start)
    service, _ = compactor(Reply(text=BLOATED))
    trial_at = start + 11 * MINUTE
    trial = service.compact(request(log.state(), now_ms=trial_at))
    assert trial.failure is not None and trial.failure.consecutive_failures == 4
    state = fold(log, trial.events, ts=trial_at)
    again = breaker_view(state, "/ws", trial_at + 5 * MINUTE)
    assert again.mode == "open" and again.failures == 4


def test_C4_breaker_is_per_normalized_workspace_and_survives_replay() -> None:
    log = coding_session(12, log=Log(workspace="/x/."))
    for n in (1, 2, 3):
        log.add(CompactionFailed(epoch=0, attempt=3, reason="error", consecutive_failures=n), ts=5_000_000)
    state = log.state()  # events.state.replay over the Records built above
    assert breaker_key("/x/.") == breaker_key("/x") == "/x"
    assert breaker_view(state, "/x", 5_000_001).mode == "open"
    assert breaker_view(state, "/x/./", 5_000_001).mode == "open"
    assert breaker_view(state, "/y", 5_000_001).mode == "closed"
    other_session = coding_session(12, log=Log("s2", workspace="/x")).state()
    assert breaker_view(other_session, "/x", 5_000_001).mode == "closed"

    service, provider = compactor()
    assert service.compact(request(state, workspace="/x", now_ms=5_000_001)).breaker.mode == "open"
    assert provider.calls == 0
    outcome = service.compact(request(state, workspace="/y", now_ms=5_000_001))
    assert outcome.breaker.mode == "closed" and provider.calls == 1


def test_C4_blocked_events_do_not_count() -> None:
    log = coding_session(2)
    log.add(CompactionFailed(epoch=0, attempt=0, reason="blocked", consecutive_failures=0))
    assert log.state().carried.compaction_failures == 0


def test_C4_three_malformed_summaries_open_the_breaker() -> None:
    log = coding_session(12)
    free = Reply(text="Everything is on track; continue.")
    service, provider = compactor(free, free, free)
    now = 10**9
    for expected in (1, 2, 3):
        outcome = service.compact(request(log.state(), now_ms=now))
        assert outcome.failure is not None and outcome.failure.reason == "malformed"
        assert outcome.failure.consecutive_failures == expected
        fold(log, outcome.events, ts=now)
        _grow(log)
        now += MINUTE
    outcome = service.compact(request(log.state(), now_ms=now))
    assert provider.calls == 3 and outcome.breaker.mode == "open"
