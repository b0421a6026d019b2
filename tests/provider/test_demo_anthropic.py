"""`cairn demo --provider anthropic` against the loopback server speaking the Messages protocol.

The server plays a terse model, as in `test_demo_openai`, in Anthropic's shape: the first request
of a task thinks (a signed block) and calls `grep`, the next answers in one sentence, and a
summary request (known by its system prompt) gets a ledger. It reports usage with cache reads,
as the API does, so the sessions run on provider floors. Every session must cross the hand-off
band, compact through the endpoint, and replay identically; the signed thinking must go back to
the server in the tool loop.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cairn import cli, demo
from cairn.store import verify_store
from tests.provider.chat_server import ChatServer, Received, Reply
from tests.provider.conftest import SECRET_KEY
from tests.provider.messages_sse import (
    base_url,
    message_delta,
    message_start,
    message_stop,
    messages_server,
    stream,
    text_events,
    thinking_events,
    tool_events,
)
from tests.provider.test_demo_openai import LEDGER, TURNS

_TAG = re.compile(r"#(demo-\d+-t\d+)")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content if isinstance(block, dict))


class TerseClaude:
    """Answers each request of the demo by what it contains (thread-safe: sessions run at once)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[str, int] = {}
        self.summaries = 0
        self.signed_back = 0

    def __call__(self, received: Received) -> Reply:
        body = received.body
        messages: list[dict[str, Any]] = body.get("messages", [])
        prompt = len(json.dumps(messages)) // 4
        usage = {
            "input_tokens": prompt // 4,
            "cache_read_input_tokens": prompt - prompt // 4,
            "output_tokens": 1,
        }
        if "<summary>" in _text(body.get("system", [])) and "tools" not in body:
            with self._lock:
                self.summaries += 1
            return self._answer(LEDGER, usage)
        users = [
            n for n, m in enumerate(messages) if m["role"] == "user" and _TAG.search(_text(m["content"]))
        ]
        task = users[-1] if users else -1
        match = _TAG.search(_text(messages[task]["content"])) if task >= 0 else None
        tag = match.group(1) if match else "no task"
        later = messages[task + 1 :]
        if any(
            b.get("type") == "thinking" and b.get("signature") == f"sig-{tag}"
            for m in later
            for b in m["content"]
        ):
            with self._lock:
                self.signed_back += 1
        if not any(b.get("type") == "tool_result" for m in later for b in m["content"]):
            with self._lock:
                self._calls[tag] = self._calls.get(tag, 0) + 1
                call_id = f"toolu-{tag}-{self._calls[tag]}"
            return stream(
                message_start(usage),
                *thinking_events(f"Grep the TODOs for {tag}.", f"sig-{tag}"),
                *text_events("Checking the open TODOs first. ", index=1),
                *tool_events(2, call_id, "grep", {"pattern": "TODO", "path": "src"}),
                message_delta("tool_use", {"output_tokens": 30}),
                message_stop(),
            )
        return self._answer(f"Done with {tag}: the attached files were reviewed and the TODOs listed.", usage)

    @staticmethod
    def _answer(text: str, usage: dict[str, int]) -> Reply:
        return stream(
            message_start(usage),
            *text_events(text),
            message_delta("end_turn", {"output_tokens": len(text) // 4}),
            message_stop(),
        )


@pytest.fixture
def model() -> TerseClaude:
    return TerseClaude()


@pytest.fixture
def endpoint(model: TerseClaude, monkeypatch: pytest.MonkeyPatch) -> Iterator[ChatServer]:
    """The server, and the CAIRN_* variables pointing the demo at it."""
    with messages_server(responder=model) as server:
        for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "CAIRN_MAX_OUTPUT_TOKENS", "CAIRN_TIMEOUT_S"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("CAIRN_BASE_URL", base_url(server))
        monkeypatch.setenv("CAIRN_API_KEY", SECRET_KEY)
        monkeypatch.setenv("CAIRN_MODEL", "claude-loopback")
        monkeypatch.setenv("CAIRN_CONTEXT_WINDOW", "16000")
        monkeypatch.setenv("CAIRN_MAX_OUTPUT_TOKENS", "3000")
        monkeypatch.setenv("CAIRN_THINKING_BUDGET", "1024")
        monkeypatch.setenv("CAIRN_STRUCTURED_SUMMARY", "off")  # the server answers summaries in text
        yield server


@pytest.fixture(autouse=True)
def join_actor_threads() -> Iterator[None]:
    """The demo closes its hosts; their actor threads are joined before the conftest looks."""
    before = set(threading.enumerate())
    yield
    for thread in threading.enumerate():
        if thread not in before and "Actor-" in thread.name:
            thread.join(30)


def test_demo_on_an_anthropic_endpoint_crosses_the_handoff_band_compacts_and_replays(
    tmp_path: Path, endpoint: ChatServer, model: TerseClaude, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"

    sizes = ["--sessions", "2", "--turns", str(TURNS)]
    code = cli.main(["demo", "--provider", "anthropic", "--store", str(store), *sizes, "--json"])

    report = json.loads(capsys.readouterr().out)
    assert code == 0, report
    assert (report["provider"], report["model"]) == ("anthropic", "claude-loopback")
    assert report["context_window"] == 16000
    assert report["replayed_identically"] == 2 and all(report["seen"].values())
    for session in report["reports"]:
        assert session["turns"] == TURNS and session["failures"] == []
        assert any(c["trigger"] == "threshold" and c["strategy"] == "llm" for c in session["checkpoints"])
    assert model.summaries >= 2 and report["observed"]["LLM checkpoints"] == model.summaries
    # each task's thinking went back with its signature in the request after its tool call
    assert model.signed_back >= 2 * TURNS
    turns = [r.body for r in endpoint.requests if "tools" in r.body]
    assert all(b["model"] == "claude-loopback" and b["thinking"]["budget_tokens"] == 1024 for b in turns)
    assert all(b["tools"][-1]["cache_control"] == {"type": "ephemeral"} for b in turns)
    assert verify_store(store).ok
    for path in store.rglob("*"):
        assert not path.is_file() or SECRET_KEY.encode() not in path.read_bytes()


def test_the_anthropic_demo_without_a_model_says_which_setting_and_exits_2(
    tmp_path: Path, endpoint: ChatServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("CAIRN_MODEL")
    code = demo.main(["--provider", "anthropic", "--store", str(tmp_path / "store"), "--json"])
    err = capsys.readouterr().err
    assert code == 2 and "CAIRN_MODEL" in err and SECRET_KEY not in err
    assert endpoint.requests == [] and not (tmp_path / "store").exists()
