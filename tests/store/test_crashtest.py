"""A short crash campaign: the writer is SIGKILLed at random moments, some rounds losing unsynced writes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cairn.store import verify_store

SCRIPT = Path(__file__).parents[2] / "scripts" / "crashtest.py"


@pytest.mark.slow
def test_crash_campaign_keeps_every_acknowledged_event(tmp_path: Path) -> None:
    store = tmp_path / "store"
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--store",
            str(store),
            "--kills",
            "20",
            "--seed",
            "7",
            "--mode",
            "both",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "20 kills" in done.stdout and done.stdout.strip().endswith("ok")
    assert verify_store(store).ok  # the store is left in place, sound


def test_crashtest_fails_when_an_invariant_breaks(tmp_path: Path) -> None:
    """The harness is not vacuous: an acknowledged event that vanished is reported."""
    from cairn.crashtest import Campaign, check
    from cairn.store import Journal
    from tests.store.helpers import fill

    store = tmp_path / "store"
    with Journal.open(store) as journal:
        fill(journal, "s", 2)
    campaign = Campaign(store=store)
    campaign.acked[("s", 9)] = (8, "0" * 16)  # claimed acknowledged, never written
    check(campaign, 1)
    assert any("seq 9 is missing" in failure for failure in campaign.failures)


def test_crashtest_fails_when_acknowledged_bytes_are_gone(tmp_path: Path) -> None:
    """Damage that reached acknowledged bytes fails the round: the writer refuses, and the harness says so."""
    from cairn.crashtest import Campaign, check
    from cairn.store import Journal
    from tests.store.helpers import fill, segment_files

    store = tmp_path / "store"
    with Journal.open(store) as journal:
        fill(journal, "s", 3)
    segment = segment_files(store)[-1]
    os.truncate(segment, segment.stat().st_size - 5)  # more than a power loss may take: an fsynced line
    campaign = Campaign(store=store)
    check(campaign, 1)
    [failure] = campaign.failures
    assert "the writer does not open" in failure and "s seq 4" in failure
