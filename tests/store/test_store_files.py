"""Store files: never opened through a link, never anything but cairn's own in `log/`, private to the user."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cairn.store import Journal, StorageError, reindex, verify_store
from tests.store.helpers import fill, msg, started

SEGMENT = "00000000000000000000.jsonl"


def _store(root: Path) -> Path:
    with Journal.open(root, segment_bytes=1_500) as journal:
        fill(journal, "a", 8)
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file of the user's, outside any store: nothing cairn does may change it."""
    path = tmp_path / "outside" / "precious.txt"
    path.parent.mkdir()
    path.write_bytes(b"the user's own data\n" * 50)
    return path


def _snapshot(path: Path) -> tuple[bytes, int, int]:
    st = os.lstat(path)
    return path.read_bytes(), st.st_mtime_ns, st.st_size


def _link_as_next_segment(root: Path, outside: Path) -> str:
    name = f"{10**6:020d}.jsonl"
    os.symlink(outside, root / "log" / name)
    return name


def _link_as_existing_segment(root: Path, outside: Path) -> str:
    (root / "log" / SEGMENT).unlink()
    os.symlink(outside, root / "log" / SEGMENT)
    return SEGMENT


def _dangling_link(root: Path, outside: Path) -> str:
    name = f"{10**6:020d}.jsonl"
    os.symlink(outside.parent / "not-there", root / "log" / name)
    return name


def _directory(root: Path, outside: Path) -> str:
    name = f"{10**6:020d}.jsonl"
    (root / "log" / name).mkdir()
    return name


def _overflowing_name(root: Path, outside: Path) -> str:
    name = "9" * 20 + ".jsonl"
    (root / "log" / name).write_bytes(b"")
    return name


def _fifo(root: Path, outside: Path) -> str:
    name = f"{10**6:020d}.jsonl"
    os.mkfifo(root / "log" / name)
    return name


def _other_file(root: Path, outside: Path) -> str:
    (root / "log" / "notes.txt").write_text("an operator's note")
    return "notes.txt"


ENTRIES: dict[str, Callable[[Path, Path], str]] = {
    "a link to an outside file under the next segment's name": _link_as_next_segment,
    "a link to an outside file in place of a segment": _link_as_existing_segment,
    "a dangling link under a segment's name": _dangling_link,
    "a directory under a segment's name": _directory,
    "a 20-digit name past the largest position": _overflowing_name,
    "a FIFO under a segment's name": _fifo,
    "a file that is not a segment": _other_file,
}


@pytest.mark.parametrize("case", list(ENTRIES))
def test_an_unexpected_entry_in_the_log_is_named_never_opened(
    tmp_path: Path, outside: Path, case: str
) -> None:
    root = _store(tmp_path / "store")
    name = ENTRIES[case](root, outside)
    kept = _snapshot(outside)
    with pytest.raises(StorageError) as info:  # a clear, typed error: not a traceback, not a truncation
        Journal.open(root)
    assert type(info.value).__name__ == "UnexpectedEntry"
    assert f"log/{name}" in str(info.value)
    assert _snapshot(outside) == kept
    report = verify_store(root)
    assert not report.ok
    assert [(p.code, p.segment) for p in report.problems if p.code == "unexpected-entry"] == [
        ("unexpected-entry", f"log/{name}")
    ]
    with pytest.raises(StorageError):
        reindex(root)
    if case != "a link to an outside file in place of a segment":
        with Journal.open(root, readonly=True) as reader:  # audit reads the segments, skips the entry
            assert any(name in entry for entry in reader.recovery.unexpected)
            assert reader.last_seq("a") == 9
    assert _snapshot(outside) == kept
    assert os.path.lexists(root / "log" / name)  # left for the operator


def _link_lock(root: Path, outside: Path) -> None:
    (root / "LOCK").unlink()
    os.symlink(outside, root / "LOCK")


def _link_mark(root: Path, outside: Path) -> None:
    (root / "ACKED").unlink()
    os.symlink(outside, root / "ACKED")


def _link_index_dir(root: Path, outside: Path) -> None:
    moved = outside.parent / "index"
    (root / "index").rename(moved)
    os.symlink(moved, root / "index")


def _link_index_file(root: Path, outside: Path) -> None:
    (root / "index" / "lock.mdb").unlink()
    os.symlink(outside, root / "index" / "lock.mdb")


def _link_log_dir(root: Path, outside: Path) -> None:
    moved = outside.parent / "log"
    (root / "log").rename(moved)
    os.symlink(moved, root / "log")


LINKS: dict[str, Callable[[Path, Path], None]] = {
    "LOCK": _link_lock,
    "ACKED": _link_mark,
    "index/": _link_index_dir,
    "index/lock.mdb": _link_index_file,
    "log/": _link_log_dir,
}


@pytest.mark.parametrize("case", list(LINKS))
def test_a_link_in_place_of_a_store_file_is_never_written_through(
    tmp_path: Path, outside: Path, case: str
) -> None:
    root = _store(tmp_path / "store")
    LINKS[case](root, outside)
    outside_files = {p: _snapshot(p) for p in sorted(outside.parent.rglob("*")) if p.is_file()}
    with pytest.raises(StorageError) as info:
        Journal.open(root)
    assert type(info.value).__name__ == "UnexpectedEntry"
    assert "symbolic link" in str(info.value)
    assert not verify_store(root).ok
    assert {p: _snapshot(p) for p in outside_files} == outside_files


@pytest.mark.parametrize("linked", ["blobs", "blobs/<fan-out>"])
def test_a_link_in_the_blob_store_is_refused_and_nothing_is_written_through_it(
    tmp_path: Path, outside: Path, linked: str
) -> None:
    root = tmp_path / "store"
    with Journal.open(root, blob_threshold=1_000) as journal:
        journal.append("a", [started()], expected_seq=0)
    big = "y" * 2_000
    fanout = hashlib.sha256(big.encode()).hexdigest()[:2]
    elsewhere = outside.parent / "elsewhere"
    elsewhere.mkdir()
    if linked == "blobs":
        os.symlink(elsewhere, root / "blobs")
        with pytest.raises(StorageError) as info:  # the store's own directory is a link: not opened
            Journal.open(root, blob_threshold=1_000)
        assert type(info.value).__name__ == "UnexpectedEntry"
        assert list(elsewhere.iterdir()) == []
        return
    (root / "blobs").mkdir()
    os.symlink(elsewhere, root / "blobs" / fanout)
    with Journal.open(root, blob_threshold=1_000) as journal:
        with pytest.raises(StorageError):
            journal.append("a", [msg(2, big)], expected_seq=1)
        assert journal.failed is None  # that append is refused; the store goes on
        journal.append("a", [msg(2, "small")], expected_seq=1)
    assert list(elsewhere.iterdir()) == []


@pytest.fixture(params=[0o022, 0o000, 0o077, 0o277])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def _modes(root: Path) -> tuple[dict[str, int], dict[str, int]]:
    """The modes of every directory and of every file of the store (the root included)."""
    found = {str(p.relative_to(root)): p for p in root.rglob("*")} | {".": root}
    dirs = {name: stat.S_IMODE(p.lstat().st_mode) for name, p in found.items() if p.is_dir()}
    files = {name: stat.S_IMODE(p.lstat().st_mode) for name, p in found.items() if not p.is_dir()}
    return dirs, files


def test_store_files_are_private_to_the_user_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    root = tmp_path / "store"  # made by cairn, in a directory of the user's
    with Journal.open(root, segment_bytes=1_500, blob_threshold=1_000) as journal:
        fill(journal, "a", 8)
        journal.append("a", [msg(10, "x" * 2_000)], expected_seq=9)  # a blob
    dirs, files = _modes(root)
    assert {"log", "index", "blobs", "."} <= set(dirs)
    assert [name for name in dirs if name.startswith("blobs/")]  # a fan-out directory
    assert {"LOCK", "index/data.mdb", "index/lock.mdb", "log/00000000000000000000.jsonl"} <= set(files)
    assert dirs == dict.fromkeys(dirs, 0o700)
    assert files == dict.fromkeys(files, 0o600)

    from cairn.store.repair import accept_loss

    segments = sorted((root / "log").iterdir())
    os.truncate(segments[-1], segments[-1].stat().st_size - 10)  # a loss, so that repair writes its files
    accept_loss(root)
    with Journal.open(root) as journal:
        journal.append("b", [msg(1)], expected_seq=0)
    dirs, files = _modes(root)
    assert {"quarantine"} <= set(dirs) and {"ACKED", "operator.jsonl"} <= set(files)
    assert dirs == dict.fromkeys(dirs, 0o700)
    assert files == dict.fromkeys(files, 0o600)


def test_a_store_made_loose_keeps_its_modes_and_verify_says_so(tmp_path: Path) -> None:
    root = _store(tmp_path / "store")
    os.chmod(root / "log", 0o755)
    os.chmod(root / "log" / SEGMENT, 0o644)
    assert verify_store(root).ok
    with Journal.open(root) as journal:  # an operator may have opened it to an audit group: left as it is
        fill(journal, "a", 1)
    assert stat.S_IMODE((root / "log").stat().st_mode) == 0o755
    [warning] = [w for w in verify_store(root).warnings if w.code == "permissions"]
    assert "log (drwxr-xr-x)" in warning.message and f"log/{SEGMENT} (-rw-r--r--)" in warning.message


def test_names_and_link_targets_someone_else_chose_are_quoted_escaped(tmp_path: Path) -> None:
    root = _store(tmp_path / "store")
    os.symlink("/tmp/\x1b[31mred\x07", root / "log" / f"{10**6:020d}.jsonl")
    (root / "log" / "\x1b[2Jclear").write_bytes(b"")
    with pytest.raises(StorageError) as info:
        Journal.open(root)
    said = [str(info.value), *(str(p) for p in verify_store(root).problems)]
    assert all("\x1b" not in text and "\x07" not in text for text in said)
    assert "/tmp/\\x1b[31mred\\x07" in said[0] and "log/\\x1b[2Jclear" in said[0]


@pytest.mark.parametrize(
    "name",
    [f"{0:020d}.jsonl\n", "\u0660" * 20 + ".jsonl", f"{0:020d}.jsonl.bak"],
    ids=["trailing-newline", "arabic-indic-digits", "suffix-after"],
)
def test_a_name_that_only_looks_like_a_segment_is_not_one(tmp_path: Path, name: str) -> None:
    """Segment names are 20 ASCII digits and `.jsonl`, matched whole (`$` would pass a final newline)."""
    root = _store(tmp_path / "store")
    (root / "log" / name).write_bytes(b"")
    with pytest.raises(StorageError) as info:
        Journal.open(root)
    assert type(info.value).__name__ == "UnexpectedEntry"
    assert [p.code for p in verify_store(root).problems] == ["unexpected-entry"]
