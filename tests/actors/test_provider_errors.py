"""A host's own provider adapter that raises or yields garbage: its error is kept (redacted), nothing breaks.

Each case runs a real host whose provider is an adapter written as a host
would: the turn must fail in phase `provider` with the adapter's own
message, secrets removed; the log must read back; the session, and every
other session of the process, must go on.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cairn.actors.provider.base import (
    ProviderFailure,
    ProviderOutput,
    ProviderRequest,
    TextDelta,
    ToolCallReady,
    UsageReport,
)
from cairn.actors.provider.redact import redact
from cairn.events.kinds import ProviderError, TurnFailed
from cairn.events.model import TextPart, ToolCall
from tests.actors.helpers import WAIT, open_host

SECRET = "sk-proj-abc123def456ghi789"


class Adapter:
    """Yields `items` then raises `error` for the request of the message "go"; answers all others."""

    def __init__(self, error: BaseException | None = None, items: tuple[object, ...] = ()) -> None:
        self.error = error
        self.items = items

    def stream(self, request: ProviderRequest) -> Iterator[ProviderOutput]:
        last = request.messages[-1]
        if last.role == "user" and last.content in ("go", (TextPart("go"),)):
            yield from self.items  # type: ignore[misc]
            if self.error is not None:
                raise self.error
            return
        yield TextDelta("fine")


def _events(host: Any, sid: str, kind: type) -> list[Any]:
    return [record.event for record in host.journal.read(sid, 1) if isinstance(record.event, kind)]


class Abort(BaseException):
    pass


RAISED = [
    (
        "runtime-error",
        RuntimeError(f"upstream said: quota exceeded for key {SECRET}"),
        "RuntimeError: upstream said: quota exceeded for key [redacted]",
    ),
    (
        "bearer",
        ConnectionError("POST /v1 with Authorization: Bearer abc.def.ghi refused"),
        "ConnectionError: POST /v1 with Authorization: Bearer [redacted] refused",
    ),
    (
        "url-credentials",
        ValueError("bad reply from https://bob:hunter2@llm.example/v1?api_key=k-123"),
        "ValueError: bad reply from https://[redacted]@llm.example/v1?api_key=[redacted]",
    ),
    (
        "provider-failure",
        ProviderFailure("rate-limit", f"slow down, key {SECRET}", status_code=429),
        "slow down, key [redacted]",
    ),
    ("keyboard-interrupt", KeyboardInterrupt("stop it"), "KeyboardInterrupt: stop it"),
    ("base-exception", Abort("gone"), "Abort: gone"),
]


@pytest.mark.parametrize("error, kept", [(e, k) for _, e, k in RAISED], ids=[i for i, _, _ in RAISED])
def test_a_raising_adapter_keeps_its_own_message_without_secrets(
    tmp_path: Path, error: BaseException, kept: str
) -> None:
    with open_host(tmp_path / "store", Adapter(error), turn_retries=0) as host:
        other = host.send("other", "hello", workspace=str(tmp_path))
        result = host.send("s1", "go", workspace=str(tmp_path)).result(timeout=WAIT)
        assert (result.status, result.phase) == ("failed", "provider")
        assert kept in result.error and SECRET not in result.error
        logged = _events(host, "s1", ProviderError)
        assert len(logged) == 1 and kept in logged[0].message
        assert SECRET not in logged[0].message
        failed = _events(host, "s1", TurnFailed)
        assert len(failed) == 1 and kept in failed[0].error
        # the session and the others live on (a BaseException must not stop every actor)
        assert other.result(timeout=WAIT).status in ("completed", "failed")
        assert host.send("s1", "again").result(timeout=WAIT).status == "completed"
        assert host.send("other", "more").result(timeout=WAIT).status == "completed"


def test_a_provider_failure_with_fields_the_log_does_not_allow_is_kept_as_a_server_error(
    tmp_path: Path,
) -> None:
    weird = ProviderFailure("weird", "teapot", status_code=9999)  # type: ignore[arg-type]
    with open_host(tmp_path / "store", Adapter(weird), turn_retries=0) as host:
        result = host.send("s1", "go", workspace=str(tmp_path)).result(timeout=WAIT)
        assert (result.status, result.phase, result.error_class) == ("failed", "provider", "server")
        (logged,) = _events(host, "s1", ProviderError)  # the line reads back
        assert (logged.error_class, logged.status_code, logged.message) == ("server", None, "teapot")


def test_a_huge_adapter_message_is_clipped(tmp_path: Path) -> None:
    with open_host(tmp_path / "store", Adapter(RuntimeError("x" * 5_000_000)), turn_retries=0) as host:
        host.send("s1", "go", workspace=str(tmp_path)).result(timeout=WAIT)
        (logged,) = _events(host, "s1", ProviderError)
        assert len(logged.message) <= 1_000


YIELDED = [
    ("text-int", (TextDelta(123),), "a malformed TextDelta"),  # type: ignore[arg-type]
    ("a-dict", ({"text": "hi"},), "a dict, not a provider output"),
    ("call-id-int", (ToolCallReady(ToolCall(5, "read")),), "`$.call.id`"),  # type: ignore[arg-type]
    ("usage-str", (UsageReport(prompt_tokens="many"),), "`$.prompt_tokens`"),  # type: ignore[arg-type]
    ("lone-surrogate", (TextDelta("bad \ud800"),), "lone surrogate"),
    ("call-id-empty", (ToolCallReady(ToolCall("", "read")),), "an empty call id or tool name"),
    ("tool-name-empty", (ToolCallReady(ToolCall("c1", "")),), "an empty call id or tool name"),
    ("usage-negative", (UsageReport(prompt_tokens=-5),), "a UsageReport with a negative count"),
]


@pytest.mark.parametrize("items, named", [(i, n) for _, i, n in YIELDED], ids=[i for i, _, _ in YIELDED])
def test_garbage_an_adapter_yields_fails_the_request_not_the_session(
    tmp_path: Path, items: tuple[object, ...], named: str
) -> None:
    with open_host(tmp_path / "store", Adapter(items=items), turn_retries=0) as host:
        result = host.send("s1", "go", workspace=str(tmp_path)).result(timeout=WAIT)
        assert (result.status, result.phase, result.error_class) == ("failed", "provider", "server")
        assert named in result.error
        assert len(_events(host, "s1", ProviderError)) == 1  # the log reads back
        assert host.send("s1", "again").result(timeout=WAIT).status == "completed"
        assert host.stats.rebuilt_after_crash == 0


@pytest.mark.parametrize(
    "text, expected",
    [
        (f"key {SECRET} refused", "key [redacted] refused"),
        ("Authorization: Bearer eyJhbGciOi.x.y", "Authorization: Bearer [redacted]"),
        ("token=abc123&model=m", "token=[redacted]&model=m"),
        ('{"api_key": "abc123"}', '{"api_key": "[redacted]"}'),
        ("ghp_0123456789abcdefABCD and AKIAABCDEFGHIJKLMNOP", "[redacted] and [redacted]"),
        ("context length is 8192 tokens; max_tokens: 100", "context length is 8192 tokens; max_tokens: 100"),
        ("the configured one: my-own-key-value", "the configured one: [redacted]"),
    ],
)
def test_redact_removes_keys_and_what_looks_like_credentials(text: str, expected: str) -> None:
    assert redact(text, ["my-own-key-value", None, ""]) == expected


class OpensEmpty:
    """An adapter as SDK streams behave: each response opens with empty deltas; the first one then
    fails with a retryable 429, the next answers."""

    def __init__(self) -> None:
        self.calls = 0

    def stream(self, request: ProviderRequest) -> Iterator[ProviderOutput]:
        from cairn.actors.provider.base import ReasoningDelta

        self.calls += 1
        yield TextDelta("")
        yield ReasoningDelta("")
        if self.calls == 1:
            raise ProviderFailure(
                "rate-limit", "slow down", status_code=429, retryable=True, retry_after_ms=10
            )
        yield TextDelta("fine")


def test_R2_an_empty_delta_is_no_output_and_the_request_is_still_retried(tmp_path: Path) -> None:
    """R2 counts text, reasoning, usage and tool calls as output; an empty delta carries none, so the
    429 after it is retried (it was failed as `delivered` before) and is logged as delivering nothing."""
    adapter = OpensEmpty()
    with open_host(tmp_path / "store", adapter) as host:
        turn = host.send("s1", "go", workspace=str(tmp_path))
        result = turn.result(timeout=WAIT)
        assert result.status == "completed", result.error
        assert [item.text for item in turn.events() if isinstance(item, TextDelta)] == ["fine"]
        (error,) = _events(host, "s1", ProviderError)
        assert (error.error_class, error.output_delivered) == ("rate-limit", False)
    assert adapter.calls == 2
