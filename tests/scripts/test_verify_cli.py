"""`cairn verify`, `cairn repair` and the read commands on damaged stores, run as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from cairn.cli import main
from cairn.store import Journal, StorageError
from tests.store.helpers import fill, msg

ROOT = Path(__file__).resolve().parents[2]
LAST = "00000000000000000012.jsonl"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """Three segments: a seqs 1-6 (pos 0-5), a 7 and b 1-5 (6-11), b 6-7 and a 8-9 (12-15)."""
    root = tmp_path / "store"
    with Journal.open(root, segment_bytes=1_500, clock_ms=lambda: 1_700_000_000_000) as journal:
        fill(journal, "a", 6)
        fill(journal, "b", 6)
        fill(journal, "a", 2)
    return root


def cairn(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cairn.cli", *argv], capture_output=True, text=True, check=False, timeout=120
    )


def _cut_last_two_lines(store: Path) -> None:
    path = store / "log" / LAST
    path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:2]))


def test_a_lost_end_of_log_fails_verify_until_an_operator_accepts_it(store: Path) -> None:
    _cut_last_two_lines(store)
    done = cairn("verify", "--store", str(store))
    assert done.returncode == 1
    assert "[acknowledged-missing] positions 14-15" in done.stdout and "a seqs 8-9" in done.stdout
    assert "session a seq 8: [acknowledged-missing]" in done.stdout

    listed = cairn("sessions", "--store", str(store), "--json")  # audit still reads what is left, and is told
    assert listed.returncode == 0
    assert {s["sid"]: s["last_seq"] for s in json.loads(listed.stdout)} == {"a": 7, "b": 7}
    assert "acknowledged lines are missing" in listed.stderr
    log = cairn("log", "a", "--store", str(store), "--json")
    assert log.returncode == 0 and len(log.stdout.splitlines()) == 7

    with pytest.raises(StorageError, match="positions 14-15"):
        Journal.open(store)
    assert cairn("reindex", "--store", str(store)).returncode == 1

    asked = cairn("repair", "--store", str(store))
    assert asked.returncode == 2 and "--accept-loss" in asked.stderr
    repaired = cairn("repair", "--store", str(store), "--accept-loss", "--reason", "restored from backup")
    assert repaired.returncode == 0, repaired.stderr
    assert "positions 14-15" in repaired.stdout and "a seqs 8-9" in repaired.stdout
    assert "accepted the loss" in repaired.stderr  # the logged warning
    again = cairn("repair", "--store", str(store), "--accept-loss")
    assert again.returncode == 2 and "nothing was changed" in again.stderr

    verified = cairn("verify", "--store", str(store), "--json")
    assert verified.returncode == 0, verified.stdout
    report = json.loads(verified.stdout)
    assert report["ok"] and not report["problems"]
    assert [w["code"] for w in report["warnings"]] == ["accepted-loss"]
    assert [(x["first_pos"], x["last_pos"], x["accepted"]) for x in report["losses"]] == [(14, 15, True)]
    with Journal.open(store) as journal:
        [record] = journal.append("a", [msg(8)], expected_seq=7)
        assert record.pos == 16
    assert cairn("verify", "--store", str(store)).returncode == 0


def test_verify_names_an_unexpected_entry_and_read_commands_skip_it(store: Path, tmp_path: Path) -> None:
    outside = tmp_path / "precious.txt"
    outside.write_bytes(b"keep me\n" * 100)
    os.symlink(outside, store / "log" / f"{10**6:020d}.jsonl")
    done = cairn("verify", "--store", str(store))
    assert done.returncode == 1
    assert f"log/{10**6:020d}.jsonl: [unexpected-entry] a symbolic link to {outside}" in done.stdout
    listed = cairn("sessions", "--store", str(store), "--json")
    assert listed.returncode == 0 and len(json.loads(listed.stdout)) == 2
    assert "not segments were skipped" in listed.stderr and "Traceback" not in listed.stderr
    repaired = cairn("repair", "--store", str(store), "--accept-loss")
    assert repaired.returncode == 1 and "Traceback" not in repaired.stderr
    assert outside.read_bytes() == b"keep me\n" * 100


def test_verify_while_a_writer_appends_exits_0(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    journal = Journal.open(store)
    stop = threading.Event()

    def append() -> None:
        seq = journal.last_seq("b")
        while not stop.is_set():
            journal.append("b", [msg(seq + 1)], expected_seq=seq)
            seq += 1

    writer = threading.Thread(target=append)
    writer.start()
    try:
        codes = [main(["verify", "--store", str(store)]) for _ in range(5)]
    finally:
        stop.set()
        writer.join()
        journal.close()
    out = capsys.readouterr().out
    assert codes == [0] * 5, out
    assert "index-differs" not in out and "PROBLEM" not in out


def test_a_damaged_index_is_a_problem_found_and_names_reindex(
    store: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """LMDB's own errors for pages that are not what it wrote (seen from outside: MDB_CORRUPTED from a
    `verify`, a bare StopIteration from `checkpoints`) exit 1, a problem the store holds, and say how
    to rebuild the index; the log itself is untouched by such damage."""
    import contextlib
    from types import SimpleNamespace

    import lmdb

    from cairn import _cli_read, cli

    def damaged(args: object) -> int:
        raise lmdb.CorruptedError("mdb_cursor_get: MDB_CORRUPTED: Located page was wrong type")

    monkeypatch.setattr(cli, "cmd_sessions", damaged)
    assert main(["sessions", "--store", str(store)]) == 1
    err = capsys.readouterr().err
    assert "the index is damaged" in err and "`cairn reindex` rebuilds it" in err

    class StaleIndex:  # names a checkpoint at a seq the log does not hold
        def last_seq(self, sid: str) -> int:
            return 9

        def checkpoints(self, sid: str) -> list[SimpleNamespace]:
            return [SimpleNamespace(seq=4)]

        def read(self, sid: str, first: int, last: int) -> list[object]:
            return []

    monkeypatch.setattr(_cli_read, "open_store", lambda args: contextlib.nullcontext(StaleIndex()))
    assert main(["checkpoints", "a", "--store", str(store)]) == 1
    err = capsys.readouterr().err
    assert "checkpoint of a at seq 4" in err and "`cairn reindex` rebuilds it" in err


def test_repair_says_which_sessions_a_gap_leaves_unreadable_and_how_much_of_them(store: Path) -> None:
    """Losing the middle segment (a seq 7, b seqs 1-5) leaves lines of both sessions past the gap:
    repair named only the lost seqs, as if the rest read; now it says each session is unreadable
    from the gap on and how many of its lines stay in the log there (a 8-9, b 6-7)."""
    (store / "log" / "00000000000000000006.jsonl").unlink()
    assert cairn("verify", "--store", str(store)).returncode == 1
    done = cairn("repair", "--accept-loss", "--store", str(store), "--reason", "disk replaced")
    assert done.returncode == 0, done.stderr
    assert "session a is unreadable from seq 7 on: 2 line(s) past the gap" in done.stdout
    assert "session b is unreadable from seq 1 on: 2 line(s) past the gap" in done.stdout
    listed = cairn("log", "a", "--store", str(store), "--to", "6")
    assert listed.returncode == 0 and listed.stdout.count("user-message") + listed.stdout.count("usage") > 0
    assert cairn("log", "a", "--store", str(store), "--from", "7").returncode == 1
