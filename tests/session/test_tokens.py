"""Local token counting (T1-T4): offline cl100k, additive, fixed image estimate, cached."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from hypothesis import given
from hypothesis import strategies as st

from cairn.actors.session.tracker import occupancy
from cairn.actors.session.view import HistoryView
from cairn.actors.tokens import TokenCounter, load_encoding
from cairn.events.codec import GENESIS, Record
from cairn.events.kinds import ToolResult
from cairn.events.model import ImagePart, Message, TextPart, ToolCall
from cairn.events.state import SessionState, evolve
from tests.session.builders import Session, counter


class CountingCounter(TokenCounter):
    """Counts how often a message is really encoded (the cache's misses)."""

    def __init__(self) -> None:
        super().__init__(load_encoding())
        self.misses = 0

    def _count_uncached(self, message: Message) -> int:
        self.misses += 1
        return super()._count_uncached(message)


def test_T1_message_count_is_the_additive_formula() -> None:
    c = counter()
    message = Message(
        role="assistant",
        content="Reading the file now.",
        reasoning="The user wants the bug fixed.",
        tool_calls=(ToolCall("call_1", "read", '{"path": "a.py"}'), ToolCall("call_2", "grep", "{}")),
        name="agent",
    )
    # T1's numbers stated literally: 4 per message, 4 per tool call (never the module's constants)
    expected = (
        4
        + c.text("assistant")
        + c.text("Reading the file now.")
        + c.text("The user wants the bug fixed.")
        + 4
        + c.text("read")
        + c.text('{"path": "a.py"}')
        + c.text("call_1")
        + 4
        + c.text("grep")
        + c.text("{}")
        + c.text("call_2")
        + c.text("agent")
    )
    assert c.message(message) == expected
    assert c.message(Message(role="user")) == 4 + c.text("user")
    assert c.text("hello world") == 2  # the real cl100k encoder
    assert c.text("user") == 1
    assert c.message(Message(role="user", content="hello world")) == 4 + 1 + 2
    # an assistant message with one call: 4 + role + text + (4 + name + arguments + id)
    call = Message(role="assistant", tool_calls=(ToolCall("c1", "read", "{}"),))
    assert c.message(call) == 4 + c.text("assistant") + 4 + c.text("read") + c.text("{}") + c.text("c1")


_messages = st.lists(
    st.builds(
        lambda role, text, reasoning: Message(
            role=role, content=text, reasoning=reasoning if role == "assistant" else None
        ),
        st.sampled_from(["system", "user", "assistant", "tool"]),
        st.text(max_size=60),
        st.none() | st.text(max_size=30),
    ),
    max_size=8,
)


@given(a=_messages, b=_messages)
def test_T1_counting_is_additive(a: list[Message], b: list[Message]) -> None:
    c = counter()
    assert c.messages(a + b) == c.messages(a) + c.messages(b)
    fresh = TokenCounter(load_encoding())
    assert fresh.messages(a + b) == sum(fresh._count_uncached(m) for m in a + b)


def test_T2_encoder_loads_offline_with_an_empty_cache_and_no_network(tmp_path) -> None:
    cache = tmp_path / "tiktoken-cache"
    cache.mkdir()
    script = textwrap.dedent(
        """
        import socket
        def refuse(*args, **kwargs):
            raise OSError("network disabled in this test")
        socket.socket = refuse
        socket.create_connection = refuse
        socket.getaddrinfo = refuse
        from cairn.actors.tokens import TokenCounter, load_encoding
        assert load_encoding("cl100k_base") is load_encoding()
        print(TokenCounter().text("hello world"))
        """
    )
    env = {**os.environ, "TIKTOKEN_CACHE_DIR": str(cache)}
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2"


def test_T2_encodings_that_would_download_are_refused() -> None:
    try:
        load_encoding("o200k_base")
    except ValueError as exc:
        assert "offline" in str(exc)
    else:
        raise AssertionError("o200k_base must not be loaded (it would be downloaded)")


def test_T3_an_image_counts_the_fixed_estimate_not_its_base64() -> None:
    c = counter()
    small = Message(role="user", content=(ImagePart(data="aGVsbG8="),))
    large = Message(role="user", content=(ImagePart(data="QUJD" * 250_000),))
    base = 4 + c.text("user")
    assert c.message(small) == c.message(large) == base + 1_600  # T3's default, stated literally
    configured = TokenCounter(load_encoding(), image_tokens=500)
    assert configured.message(large) == base + 500
    mixed = Message(role="user", content=(TextPart("look"), ImagePart(url="https://x/y.png")))
    assert c.message(mixed) == base + c.text("look") + 1_600


def test_T4_counts_are_cached_by_id_and_content() -> None:
    c = CountingCounter()
    first = Message(role="user", content="the same words", id="m1")
    assert c.message(first) == c.message(first)
    assert c.misses == 1
    rebuilt = Message(role="user", content="the same words", id="m1")  # e.g. after replay
    c.message(rebuilt)
    assert c.misses == 1
    c.message(Message(role="user", content="other words", id="m1"))  # same id, new content
    c.message(Message(role="user", content="the same words", id="m2"))  # same content, new id
    assert c.misses == 3


def test_T4_a_turn_costs_only_its_new_messages() -> None:
    session = Session()
    for _ in range(300):
        session.tool_turn(output="some output " * 20)
    c = CountingCounter()
    view = HistoryView(c)
    occupancy(session.state, view)
    assert c.misses == len(session.state.context) + 1  # every message once, plus the system prompt
    before = c.misses
    state: SessionState = session.state
    event = ToolResult(call_id="late", tool_name="read", status="ok", effect="read", content=(TextPart("x"),))
    state = evolve(state, Record(0, "s1", state.last_seq + 1, 0, GENESIS, event))
    occupancy(state, view)
    assert c.misses == before + 1
