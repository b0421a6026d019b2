"""Transient provider errors of a turn: sent again after 375 ms then 750 ms, or after the server's
hint on a 429 or 503 (with jitter, up to a cap), each try in the log."""

from __future__ import annotations

from pathlib import Path

from cairn.actors.provider.retry import RetryPolicy
from cairn.actors.provider.scripted import Fail, FailAfter, Reply, http_error
from cairn.events.kinds import CheckpointCommitted, ProviderError, Request, TurnFailed
from tests.actors.helpers import WAIT, Seed, open_host, reopen_and_compare, scripted


def _log(host, kind):  # type: ignore[no-untyped-def]
    return [r.event for r in host.journal.read("s") if isinstance(r.event, kind)]


def test_a_rate_limit_then_a_server_error_are_retried_and_the_turn_completes(tmp_path: Path) -> None:
    waits: list[float] = []
    provider = scripted(http_error(429), http_error(503), Reply(text="done"))
    host = open_host(tmp_path / "store", provider, sleep=waits.append)

    result = host.send("s", "hello", workspace=str(tmp_path)).result(WAIT)

    assert result.ok and result.text == "done"
    assert waits == [0.375, 0.75]
    assert [e.status_code for e in _log(host, ProviderError)] == [429, 503]
    requests = _log(host, Request)
    assert [r.attempt for r in requests] == [1, 2, 3]
    assert len({r.request_id for r in requests}) == 3
    reopen_and_compare(host, tmp_path / "store", ["s"]).close()


def test_the_turn_fails_when_the_retries_are_used_up(tmp_path: Path) -> None:
    provider = scripted(http_error(503), http_error(503), http_error(502), Reply(text="never"))
    host = open_host(tmp_path / "store", provider, turn_retries=2)

    result = host.send("s", "hello", workspace=str(tmp_path)).result(WAIT)

    assert (result.status, result.phase, result.error_class) == ("failed", "provider", "server")
    assert len(_log(host, Request)) == 3 and len(_log(host, ProviderError)) == 3
    assert [e.phase for e in _log(host, TurnFailed)] == ["provider"]
    assert len([r for r in provider.requests if r.purpose == "turn"]) == 3
    reopen_and_compare(host, tmp_path / "store", ["s"]).close()


def test_a_non_transient_error_is_not_retried(tmp_path: Path) -> None:
    provider = scripted(http_error(400), Reply(text="never"))
    host = open_host(tmp_path / "store", provider)

    result = host.send("s", "hello", workspace=str(tmp_path)).result(WAIT)

    assert (result.status, result.error_class) == ("failed", "bad-request")
    assert len(_log(host, Request)) == 1
    host.close()


def test_R2_an_error_after_output_is_never_retried(tmp_path: Path) -> None:
    provider = scripted(
        FailAfter(failure=Fail(error_class="server", message="reset", status_code=503, retryable=True)),
        Reply(text="never"),
    )
    host = open_host(tmp_path / "store", provider)

    result = host.send("s", "hello", workspace=str(tmp_path)).result(WAIT)

    assert result.status == "failed" and result.phase == "provider"
    [error] = _log(host, ProviderError)
    assert error.output_delivered
    assert len(_log(host, Request)) == 1
    host.close()


def test_C5_a_turn_honours_the_hint_of_a_scripted_429_and_records_the_wait(tmp_path: Path) -> None:
    waits: list[float] = []
    provider = scripted(
        http_error(429, retry_after_ms=4_000), http_error(503, retry_after_ms=10), Reply(text="done")
    )
    host = open_host(tmp_path / "store", provider, sleep=waits.append, retry_draw=lambda: 0.25)

    assert host.send("s", "hello", workspace=str(tmp_path)).result(WAIT).ok

    assert waits == [4.2, 0.787]  # 4 s + 5 %; then the 750 ms floor (over a 10 ms hint) + 5 %
    errors = _log(host, ProviderError)
    assert [(e.retry_after_ms, e.retry_wait_ms) for e in errors] == [(4_000, 4_200), (10, 787)]
    reopen_and_compare(host, tmp_path / "store", ["s"]).close()


def test_C5_the_compactor_of_a_session_waits_the_summary_calls_hint(tmp_path: Path) -> None:
    """The host's retry policy and draw reach the session's compactor (a manual compaction, K4)."""
    waits: list[float] = []
    provider = scripted(summaries=(http_error(429, retry_after_ms=2_500),))
    host = open_host(
        tmp_path / "store",
        provider,
        sleep=waits.append,
        retry_draw=lambda: 0.5,
        retry=RetryPolicy(max_wait_ms=5_000),
    )
    seed = Seed(host.journal, "s", str(tmp_path))
    for _ in range(6):
        seed.turn(tools=[2_000])

    record = host.compact("s").record

    assert record is not None and isinstance(record.event, CheckpointCommitted)
    checkpoint = record.event
    assert checkpoint.strategy == "llm"
    assert waits == [2.75]
    assert checkpoint.diagnostics.retry_delays_ms == (2_750,)
    assert checkpoint.diagnostics.retry_after_ms == (2_500,)
    host.close()


def test_C5_a_scripted_hint_over_the_cap_ends_the_turn_without_waiting(tmp_path: Path) -> None:
    waits: list[float] = []
    provider = scripted(http_error(429, retry_after_ms=61_000), Reply(text="never"))
    host = open_host(tmp_path / "store", provider, sleep=waits.append)

    result = host.send("s", "hello", workspace=str(tmp_path)).result(WAIT)

    assert (result.status, result.error_class) == ("failed", "rate-limit")
    assert "61 s" in result.error and waits == []
    assert len(_log(host, Request)) == 1
    host.close()
