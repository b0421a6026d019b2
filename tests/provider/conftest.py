"""Fixtures of the provider tests: a chat server on loopback per test, and no thread left behind."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from cairn.actors.provider.config import OpenAIConfig
from cairn.actors.provider.openai_compat import OpenAIProvider
from tests.provider.chat_server import ChatServer

#: a key that must never show up anywhere but the Authorization header
SECRET_KEY = "sk-cairn-test-5f1e9a0c7d3b42e8a6c1"

Connect = Callable[..., OpenAIProvider]


@pytest.fixture(autouse=True)
def no_leaked_threads() -> Iterator[None]:
    before = set(threading.enumerate())
    yield
    leaked = [t.name for t in threading.enumerate() if t not in before and t.is_alive()]
    assert not leaked, f"threads left running: {leaked}"


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with ChatServer() as chat:
        yield chat


@pytest.fixture
def connect(server: ChatServer) -> Iterator[Connect]:
    """Providers on `server`, closed at the end of the test (before the server)."""
    made: list[OpenAIProvider] = []

    def make(**settings: Any) -> OpenAIProvider:
        settings.setdefault("model", "test-model")
        settings.setdefault("api_key", SECRET_KEY)
        # the servers these tests script answer summaries in C7's text protocol; the JSON ledger
        # (`actors.compactor.structured`) has tests of its own that ask for it
        settings.setdefault("structured_summary", "off")
        provider = OpenAIProvider(OpenAIConfig(base_url=server.url, **settings))
        made.append(provider)
        return provider

    yield make
    for provider in made:
        provider.close()
