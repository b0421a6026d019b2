"""Prompt caching on the Anthropic adapter, accounted end to end: a session on a real HTTP server on
127.0.0.1 that streams the Messages protocol with cache figures, the breakpoints the session names in
the requests it sends, the three figures in the log, and `cairn sessions` run as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cairn import Host, SessionSettings, WorkspaceTools
from cairn.actors.provider.anthropic_config import AnthropicConfig
from cairn.actors.provider.anthropic_messages import AnthropicProvider
from cairn.events.kinds import Usage
from cairn.store import Journal
from tests.actors.helpers import WAIT, Clock, config_from
from tests.provider.chat_server import ChatServer
from tests.provider.conftest import SECRET_KEY
from tests.provider.messages_sse import (
    base_url,
    message_delta,
    message_start,
    message_stop,
    messages_server,
    stream,
    text_events,
    text_message,
    tool_events,
)

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = SessionSettings(model="claude-test", context_window=128_000, system_prompt="You are a test agent.")


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with messages_server() as loopback:
        yield loopback


def _marks(value: Any) -> int:
    """How many `cache_control` breakpoints a request body carries."""
    if isinstance(value, dict):
        return ("cache_control" in value) + sum(_marks(v) for v in value.values())
    if isinstance(value, list):
        return sum(_marks(v) for v in value)
    return 0


def test_cache_reads_and_writes_from_the_messages_stream_reach_the_log_and_cairn_sessions(
    server: ChatServer, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("alpha\nbeta\n")
    server.plan(
        stream(
            message_start(
                {"input_tokens": 50, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 1_500}
            ),
            *text_events("Let me read it."),
            *tool_events(1, "toolu_01", "read", {"path": "notes.txt"}),
            message_delta("tool_use", {"output_tokens": 60}),
            message_stop(),
        ),
        text_message(
            "alpha and beta.",
            usage={"input_tokens": 40, "cache_read_input_tokens": 1_500, "cache_creation_input_tokens": 80},
            output_tokens=9,
        ),
        text_message(
            "You are welcome.",
            usage={"input_tokens": 12, "cache_read_input_tokens": 1_580, "cache_creation_input_tokens": 30},
            output_tokens=1,
        ),
    )
    provider = AnthropicProvider(
        AnthropicConfig(model="claude-test", base_url=base_url(server), api_key=SECRET_KEY)
    )
    host = Host.open(
        tmp_path / "store",
        provider=provider,
        tools=WorkspaceTools(),
        settings=SETTINGS,
        clock_ms=Clock(),
        sleep=lambda seconds: None,
        config=config_from({}),
    )
    try:
        assert host.send("s", "What is in notes.txt?", workspace=workspace).result(WAIT).ok
        assert host.send("s", "Thanks.").result(WAIT).ok
    finally:
        host.close()
        provider.close()

    # the session's breakpoint on the newest message, beside the adapter's on the tools and system
    first, second, third = (request.body for request in server.requests)
    assert first["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert second["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert [_marks(body) for body in (first, second, third)] == [3, 3, 3]

    with Journal.open(tmp_path / "store", readonly=True) as journal:
        usages = [r.event for r in journal.read("s") if isinstance(r.event, Usage)]
    assert [(u.prompt_tokens, u.cached_prompt_tokens, u.cache_write_tokens) for u in usages] == [
        (1_550, 0, 1_500),
        (1_620, 1_500, 80),
        (1_622, 1_580, 30),
    ]

    listed = subprocess.run(
        [sys.executable, "-m", "cairn.cli", "sessions", "--store", str(tmp_path / "store"), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert listed.returncode == 0, listed.stderr
    [session] = json.loads(listed.stdout)
    assert (session["cache_read_tokens"], session["cache_write_tokens"]) == (3_080, 1_610)
    assert round(session["cache_hit_ratio"], 4) == 0.6427  # 3,080 / (1,550 + 1,620 + 1,622)
    assert session["cache_breaks"] == 0
    assert session["prompt_tokens"] == 4_792
