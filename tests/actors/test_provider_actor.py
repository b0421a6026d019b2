"""The provider actor streams one adapter's output back as messages; the scripted adapter's turns."""

from __future__ import annotations

import threading
from typing import Any

import pykka
import pytest

from cairn.actors.provider.actor import ProviderActor, ProviderDone, ProviderFailed, ProviderItem, StreamJob
from cairn.actors.provider.base import (
    Finished,
    ProviderFailure,
    ProviderRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallReady,
    UsageReport,
    complete,
)
from cairn.actors.provider.scripted import (
    FailAfter,
    Reply,
    ScriptedProvider,
    context_limit,
    empty_reply,
    http_error,
)
from cairn.events.model import Message, ToolCall

WAIT = 10.0


class Collector(pykka.ThreadingActor):
    """Stands in for the session: keeps what it is told and signals the end of a job."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[Any] = []
        self.ended = threading.Event()

    def on_receive(self, message: Any) -> Any:
        self.messages.append(message)
        if isinstance(message, ProviderDone | ProviderFailed):
            self.ended.set()
        return None


def _request(text: str = "hello") -> ProviderRequest:
    return ProviderRequest(model="m", messages=(Message(role="user", content=text, id="u1"),))


def _run(adapter: ScriptedProvider, request: ProviderRequest | None = None) -> list[Any]:
    collector = Collector.start()
    provider = ProviderActor.start(adapter)
    try:
        box = collector.proxy()
        ended: threading.Event = box.ended.get(timeout=WAIT)
        provider.tell(StreamJob(1, request or _request(), collector, threading.Event()))
        assert ended.wait(WAIT)
        return list(box.messages.get(timeout=WAIT))
    finally:
        provider.stop(timeout=WAIT)
        collector.stop(timeout=WAIT)


def test_provider_actor_streams_items_in_order_then_done() -> None:
    call = ToolCall("c1", "read", '{"path": "a.py"}')
    adapter = ScriptedProvider([Reply(text="abcdefgh", reasoning="think", tool_calls=(call,))], chunk_chars=3)
    messages = _run(adapter)
    items = [m.item for m in messages if isinstance(m, ProviderItem)]
    assert [type(i) for i in items] == [
        ReasoningDelta,
        ReasoningDelta,
        TextDelta,
        TextDelta,
        TextDelta,
        ToolCallReady,
        UsageReport,
        Finished,
    ]
    assert "".join(i.text for i in items if isinstance(i, TextDelta)) == "abcdefgh"
    assert isinstance(messages[-1], ProviderDone) and messages[-1].job == 1


def test_provider_actor_failure_before_output_is_not_delivered() -> None:
    messages = _run(ScriptedProvider([http_error(429)]))
    assert len(messages) == 1
    failed = messages[0]
    assert isinstance(failed, ProviderFailed)
    assert failed.error_class == "rate-limit" and failed.retryable and not failed.delivered


def test_provider_actor_failure_after_output_is_delivered() -> None:
    messages = _run(ScriptedProvider([FailAfter(failure=context_limit(), text="partial")]))
    assert isinstance(messages[0], ProviderItem)
    failed = messages[-1]
    assert isinstance(failed, ProviderFailed)
    assert failed.error_class == "context-limit" and failed.delivered


def test_provider_actor_reports_an_adapter_bug_as_a_failure() -> None:
    class Broken:
        def stream(self, request: ProviderRequest) -> Any:
            raise KeyError("bug")

    collector = Collector.start()
    provider = ProviderActor.start(Broken())
    try:
        ended = collector.proxy().ended.get(timeout=WAIT)
        provider.tell(StreamJob(7, _request(), collector, threading.Event()))
        assert ended.wait(WAIT)
        messages = collector.proxy().messages.get(timeout=WAIT)
        assert isinstance(messages[0], ProviderFailed) and messages[0].error_class == "server"
        # issue 10: the adapter's own message is kept (redacted: see test_provider_errors.py)
        assert messages[0].message == "the provider adapter raised KeyError: 'bug'"
        assert provider.is_alive()
    finally:
        provider.stop(timeout=WAIT)
        collector.stop(timeout=WAIT)


def test_provider_actor_cancel_stops_forwarding() -> None:
    cancel = threading.Event()
    cancel.set()
    collector = Collector.start()
    provider = ProviderActor.start(ScriptedProvider([Reply(text="never shown")]))
    try:
        ended = collector.proxy().ended.get(timeout=WAIT)
        provider.tell(StreamJob(2, _request(), collector, cancel))
        assert ended.wait(WAIT)
        messages = collector.proxy().messages.get(timeout=WAIT)
        assert len(messages) == 1 and isinstance(messages[0], ProviderFailed)
        assert messages[0].message == "cancelled" and not messages[0].delivered
    finally:
        provider.stop(timeout=WAIT)
        collector.stop(timeout=WAIT)


def test_provider_actor_stops_when_the_session_is_gone() -> None:
    collector = Collector.start()
    collector.stop(timeout=WAIT)
    cancel = threading.Event()
    provider = ProviderActor.start(ScriptedProvider([Reply(text="x")]))
    try:
        provider.ask(StreamJob(3, _request(), collector, cancel), timeout=WAIT)
        assert cancel.is_set()
    finally:
        provider.stop(timeout=WAIT)


# --- the scripted adapter's turns ------------------------------------------------------


def test_scripted_window_refuses_an_oversized_prompt_before_output() -> None:
    adapter = ScriptedProvider(context_window=50)
    assert complete(adapter, _request("short")).text == "Done."
    with pytest.raises(ProviderFailure) as caught:
        complete(adapter, _request("x" * 1_000))
    assert caught.value.error_class == "context-limit" and not caught.value.output_delivered


def test_scripted_responder_answers_when_the_plan_is_empty() -> None:
    seen: list[int] = []

    def responder(request: ProviderRequest) -> Reply | None:
        seen.append(len(request.messages))
        return Reply(text=f"{len(request.messages)} messages") if request.purpose == "turn" else None

    adapter = ScriptedProvider([Reply(text="planned")], responder=responder)
    assert complete(adapter, _request()).text == "planned"
    assert complete(adapter, _request()).text == "1 messages"
    assert seen == [1]


def test_scripted_failures_of_every_kind() -> None:
    adapter = ScriptedProvider(
        [context_limit(), FailAfter(failure=context_limit()), http_error(429), http_error(503), empty_reply()]
    )
    classes = []
    for _ in range(4):
        with pytest.raises(ProviderFailure) as caught:
            complete(adapter, _request())
        classes.append((caught.value.error_class, caught.value.output_delivered, caught.value.retryable))
    assert classes == [
        ("context-limit", False, False),
        ("context-limit", True, False),
        ("rate-limit", False, True),
        ("server", False, True),
    ]
    empty = complete(adapter, _request())
    assert empty.text == "" and empty.usage is not None
    assert adapter.calls == 5
