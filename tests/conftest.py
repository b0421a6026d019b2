"""Shared test settings: deterministic hypothesis profiles."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

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
