"""A store on a read-only file system (issue 23 point 5): opening it to write is a `CairnError`
naming the path, never a bare `OSError`; it still opens to read, and the read commands work on it.

Mounts a small tmpfs, writes a store, remounts it read-only: skipped where mounting is not allowed
(not root, or no mount namespace)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn import CairnError, Host
from cairn.actors.provider.scripted import ScriptedProvider
from cairn.store import Journal, StorageFailed
from tests.store.helpers import msg, started


def _mount(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30)


@pytest.fixture
def read_only_store(tmp_path: Path) -> Iterator[Path]:
    mountpoint = tmp_path / "ro"
    mountpoint.mkdir()
    made = _mount("-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mountpoint))
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        store = mountpoint / "store"
        with Journal.open(store) as journal:
            journal.append("s", [started(), msg(2)], expected_seq=0)
        remounted = _mount("-o", "remount,ro", str(mountpoint))
        assert remounted.returncode == 0, remounted.stderr
        yield store
    finally:
        subprocess.run(["umount", str(mountpoint)], capture_output=True, timeout=30)


def test_opening_a_read_only_store_to_write_is_a_typed_error_naming_it(read_only_store: Path) -> None:
    for open_it in (
        lambda: Journal.open(read_only_store),
        lambda: Host.open(read_only_store, provider=ScriptedProvider(turns=())),
    ):
        with pytest.raises(StorageFailed) as refused:
            open_it()
        assert isinstance(refused.value, CairnError)
        assert f"cannot open the store at {read_only_store} for writing: Read-only file system" in str(
            refused.value
        )
    with Journal.open(read_only_store, readonly=True) as journal:
        assert journal.last_seq("s") == 2


def test_read_commands_work_and_writing_ones_fail_in_one_line(read_only_store: Path) -> None:
    cairn = Path(sys.executable).with_name("cairn")
    for command in (["sessions"], ["log", "s"], ["verify"]):
        ran = subprocess.run(
            [str(cairn), *command, "--store", str(read_only_store)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert ran.returncode == 0 and "Traceback" not in ran.stderr, (command, ran.stderr)
    ran = subprocess.run(
        [str(cairn), "reindex", "--store", str(read_only_store)], capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 2 and "Traceback" not in ran.stderr
    assert ran.stderr.strip().splitlines() == [
        f"cairn: StorageFailed: cannot open the store at {read_only_store} for writing: Read-only file system"
        f" ({read_only_store / 'LOCK'}); a read-only store opens with readonly=True"
    ]
