"""The summary contract over the wire (C7): a chat-completions server on 127.0.0.1 whose model
answers summary requests in free text, through the real OpenAI adapter and a real host's session.
The free text is a failed summary (`malformed`), the fallback is committed, and the turn goes on."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn import Host, HostConfig, SessionSettings, WorkspaceTools
from cairn.actors.provider.config import OpenAIConfig
from cairn.actors.provider.openai_compat import OpenAIProvider
from cairn.events.kinds import CheckpointCommitted, CompactionFailed
from tests.actors.helpers import WAIT, Clock, reopen_and_compare, words
from tests.provider.chat_server import ChatServer, Received, Reply, api_error, text_reply
from tests.provider.conftest import SECRET_KEY

SID = "s"
SETTINGS = SessionSettings(model="test-model", context_window=128_000, system_prompt="You are a test agent.")
FREE_TEXT = "<analysis>Looked at it.</analysis>\n<summary>The user asked about notes; all good.</summary>"


def is_summary(received: Received) -> bool:
    messages = received.body.get("messages") or []
    return "tools" not in received.body and bool(messages) and "<summary>" in str(messages[0].get("content"))


def free_text_model(received: Received) -> Reply | None:
    """A model that answers every summary request without the seven headings."""
    return text_reply(FREE_TEXT) if is_summary(received) else None


@pytest.fixture
def chat() -> Iterator[ChatServer]:
    with ChatServer(responder=free_text_model) as server:
        yield server


@pytest.fixture
def host(chat: ChatServer, tmp_path: Path) -> Iterator[Host]:
    """A host on the OpenAI adapter and `chat`; closed (and its actor threads joined) even when a
    test fails, so the provider conftest finds no thread left running."""
    before = set(threading.enumerate())
    config = OpenAIConfig(base_url=chat.url, model="test-model", api_key=SECRET_KEY, structured_summary="off")
    with OpenAIProvider(config) as provider:
        opened = Host.open(
            tmp_path / "store",
            provider=provider,
            tools=WorkspaceTools(),
            settings=SETTINGS,
            clock_ms=Clock(),
            sleep=lambda seconds: None,
            config=HostConfig(sweep=False),
        )
        try:
            yield opened
        finally:
            opened.close()
    for thread in threading.enumerate():
        if thread not in before and "Actor-" in thread.name:
            thread.join(WAIT)


def test_C7_a_free_text_summary_from_the_endpoint_is_refused_and_the_fallback_recovers_the_turn(
    chat: ChatServer, host: Host, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    chat.plan(text_reply("Noted.", usage=(2_300, 5, 2_305)))
    question = "Remember this background: " + words(2_000, "background")
    assert host.send(SID, question, workspace=workspace).result(WAIT).ok
    overflow = api_error(400, "maximum context length exceeded", code="context_length_exceeded")
    chat.plan(overflow)  # the summary call then goes to the free-text model; the replay to the default

    result = host.send(SID, "And now?").result(WAIT)

    assert result.ok and result.text == "Done."
    summaries = [r for r in chat.requests if is_summary(r)]
    assert len(summaries) == 1  # refused at once, not retried
    records = list(host.journal.read(SID))
    (failure,) = [r.event for r in records if isinstance(r.event, CompactionFailed)]
    assert (failure.trigger, failure.reason) == ("reactive", "malformed")
    (checkpoint,) = [r.event for r in records if isinstance(r.event, CheckpointCommitted)]
    assert (checkpoint.trigger, checkpoint.strategy) == ("reactive", "fallback")
    assert checkpoint.raw_summary is None
    assert checkpoint.replacement_tokens < checkpoint.source_tokens
    reopen_and_compare(host, tmp_path / "store", [SID]).close()
