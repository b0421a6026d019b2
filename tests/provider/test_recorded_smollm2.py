"""What SmolLM2-135M on llama.cpp's server really answered (issue 32 point 5), replayed through the real
OpenAI adapter from streams recorded once (`tests/fixtures/record_smollm2.py`): a summary in free
text that has none of the seven headings and runs to its cap, a JSON ledger cut mid-object by the
output cap, and a turn where the model, offered a tool, writes code instead of calling it. Never a
crash or a loop: a failed summary with its reason and the fallback, a completed turn."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn import Host, SessionSettings, WorkspaceTools
from cairn.actors.compactor import Compactor, verify_checkpoint
from cairn.actors.provider.config import OpenAIConfig
from cairn.actors.provider.openai_compat import OpenAIProvider
from cairn.events.codec import Record
from cairn.events.kinds import CompactionFailed, SessionStarted, ToolResult
from tests.compactor.builders import COUNTER, Log, coding_session, request
from tests.provider.chat_server import ChatServer, Sse

FIXTURES = Path(__file__).parents[1] / "fixtures" / "smollm2"


def recorded(name: str) -> Sse:
    """A recorded stream, its `data:` events sent as the server sent them."""
    lines = (FIXTURES / f"{name}.sse").read_text().splitlines()
    return Sse(tuple(f"{line}\n\n" for line in lines if line.startswith("data: ")))


@pytest.fixture
def chat() -> Iterator[ChatServer]:
    with ChatServer() as server:
        yield server


def _session_with_cap(cap: int) -> Log:
    """The builders' coding session, started with an output cap (the summary asks for no more)."""
    log = coding_session(6, output_chars=600)
    first = log.records[0]
    assert isinstance(first.event, SessionStarted)
    started = SessionStarted(workspace="/ws", model="m", context_window=100_000, max_output_tokens=cap)
    log.records[0] = Record(first.pos, first.sid, first.seq, first.ts, first.prev, started)
    return log


def _compact(chat: ChatServer, cap: int, mode: str):
    provider = OpenAIProvider(OpenAIConfig(base_url=chat.url, model="smollm2", structured_summary=mode))  # type: ignore[arg-type]
    with provider:
        state = _session_with_cap(cap).state()
        outcome = Compactor(provider, model="smollm2", sleep=lambda _s: None, counter=COUNTER).compact(
            request(state)
        )
    verify_checkpoint(state.context, outcome.checkpoint, COUNTER)
    return outcome


def test_C7_smollm2s_free_text_summary_has_no_heading_and_the_fallback_takes_over(chat: ChatServer) -> None:
    """Asked for C7's headings in free text, it wrote a numbered list ('# 1.' ... '# 68') to its
    400-token cap: refused as malformed at once (not retried, C5), the fallback compacts."""
    chat.plan(recorded("summary_text"))
    outcome = _compact(chat, 400, "off")
    failure = outcome.failure
    assert isinstance(failure, CompactionFailed) and failure.reason == "malformed"
    assert "has none of the seven ledger headings (C7)" in failure.detail
    assert outcome.checkpoint.strategy == "fallback" and len(chat.requests) == 1


def test_C7_smollm2s_json_ledger_cut_mid_object_by_its_cap_is_malformed_with_that_reason(
    chat: ChatServer,
) -> None:
    """Its JSON ledger stopped at the 40 tokens it was allowed ('"1.1.1.1...'): malformed, 'cut
    short by the output limit', one call, the fallback."""
    chat.plan(recorded("summary_json_cut"))
    outcome = _compact(chat, 40, "on")
    failure = outcome.failure
    assert isinstance(failure, CompactionFailed) and failure.reason == "malformed"
    assert "cut short by the output limit (finish 'length')" in failure.detail
    assert outcome.checkpoint.strategy == "fallback" and len(chat.requests) == 1


def test_smollm2_offered_a_tool_writes_code_instead_and_the_turn_completes(
    chat: ChatServer, tmp_path: Path
) -> None:
    """It never called `read`: it wrote a Python snippet that would read the file, until its cap.
    The turn completes with that text and runs no tool."""
    chat.plan(recorded("turn_with_tools"))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    before = set(threading.enumerate())
    provider = OpenAIProvider(OpenAIConfig(base_url=chat.url, model="smollm2"))
    settings = SessionSettings(model="smollm2", context_window=4096, max_output_tokens=120)
    host = Host.open(tmp_path / "store", provider=provider, tools=WorkspaceTools(), settings=settings)
    try:
        result = host.send("s", "Read src/cart.py and tell me what it does.", workspace=workspace).result(60)
        assert result.status == "completed", result
        assert result.text.startswith("Here's a sample of a Python script") and result.requests == 1
        assert not [r for r in host.journal.read("s") if isinstance(r.event, ToolResult)]
    finally:
        host.close()
        provider.close()
    for thread in threading.enumerate():
        if thread not in before and "Actor-" in thread.name:
            thread.join(30)
