"""A store holding every event kind, forks, a blob and one corrupted session, for the export tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cairn import demo
from cairn.store import Journal
from tests.every_kind import add_the_rest
from tests.store.helpers import msg, started, usage

BROKEN = "broken"
#: the text of the broken session's line whose bytes the fixture alters (same length, so only the crc fails)
MARK, ALTERED = b"corrupt-me", b"CORRUPT-ME"


def build_store(root: Path) -> None:
    """The demo's sessions, plus `tests.every_kind`'s (a blob, a failed turn, a cancelled one, two forks,
    an owner change), and a broken session."""
    report = demo.run(root, 5, 12, show=False, plain=False)
    assert report["ok"], report
    add_the_rest(root)
    with Journal.open(root) as journal:
        journal.append(BROKEN, [started(), msg(2, "fine"), msg(3, MARK.decode()), usage(4)], expected_seq=0)
        # a line after the damaged one, so it is durable corruption and not a torn tail
        journal.append("extra", [msg(99, "after")], expected_seq=journal.last_seq("extra"))
    segments = sorted((root / "log").glob("*.jsonl"))
    data = segments[-1].read_bytes()
    assert data.count(MARK) == 1
    segments[-1].write_bytes(data.replace(MARK, ALTERED))


@pytest.fixture(scope="session")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("audit") / "store"
    build_store(root)
    return root


@pytest.fixture
def store(pristine: Path, tmp_path: Path) -> Path:
    """A private copy of the store (some tests append to it)."""
    copy = tmp_path / "store"
    shutil.copytree(pristine, copy, ignore=shutil.ignore_patterns("LOCK", "*.lock"))
    return copy
