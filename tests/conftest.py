"""Shared test settings: deterministic hypothesis profiles, and the real local model server."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings

if TYPE_CHECKING:
    from cairn.local_model import LocalModelServer

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=100,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", derandomize=True, deadline=None, max_examples=50)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# `cairn demo` places its process as CAIRN_CPU says (actors.placement; unset: the OS's placement);
# a user's CAIRN_CPU must not pin the test runner, and test_placement checks pinning in child processes.
os.environ["CAIRN_CPU"] = "off"


@pytest.fixture(scope="session")
def local_model() -> Iterator[LocalModelServer]:
    """llama.cpp's server with SmolLM2-135M on 127.0.0.1 (the `llm` extra), shared by the session's
    tests; skipped with the reason where the extra or the model is not installed."""
    from cairn.local_model import LocalModelServer, unavailable

    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    with LocalModelServer(context_window=2048, parallel=2) as server:
        yield server
