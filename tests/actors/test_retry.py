"""Transient provider errors of a turn: sent again after 375 ms then 750 ms, each try in the log."""

from __future__ import annotations

from pathlib import Path

from actors.provider.scripted import Fail, FailAfter, Reply, http_error
from events.kinds import ProviderError, Request, TurnFailed
from tests.actors.helpers import WAIT, open_host, reopen_and_compare, scripted


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
    provider = scripted(FailAfter(failure=Fail(error_class="server", message="reset", status_code=503,
                                               retryable=True)),
                        Reply(text="never"))
    host = open_host(tmp_path / "store", provider)

    result = host.send("s", "hello", workspace=str(tmp_path)).result(WAIT)

    assert result.status == "failed" and result.phase == "provider"
    [error] = _log(host, ProviderError)
    assert error.output_delivered
    assert len(_log(host, Request)) == 1
    host.close()
