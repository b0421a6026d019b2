"""Fixtures shared by the actor tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest


@pytest.fixture
def thread_crashes() -> Iterator[list[str]]:
    """Exceptions that ended a thread (what `threading.excepthook` would print as a traceback)."""
    seen: list[str] = []
    hook = threading.excepthook
    threading.excepthook = lambda args: seen.append(f"{args.thread}: {args.exc_type.__name__}")
    yield seen
    threading.excepthook = hook
