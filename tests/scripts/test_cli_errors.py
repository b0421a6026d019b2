"""The `cairn` commands on odd input: one clear line on stderr and exit 2, never a traceback.

Exit 2 is for what keeps a command from running (bad arguments, a path that
is no store, a store another process writes, an unreadable path); exit 1 is
only for problems the store holds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn import cli
from cairn.events.kinds import SessionStarted, TurnStarted, UserMessage
from cairn.events.model import TextPart
from cairn.store import Journal

ROOT = Path(__file__).resolve().parents[2]
CAIRN = Path(sys.executable).parent / "cairn"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    with Journal.open(root) as journal:
        journal.append(
            "alpha",
            [
                SessionStarted(workspace="/w", model="m"),
                UserMessage(message_id="u1", content=(TextPart("hello"),)),
                TurnStarted(turn_id="t1", message_id="u1"),
            ],
            expected_seq=0,
        )
    return root


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _one_line_exit_2(result: tuple[int, str, str], *words: str) -> None:
    code, _, err = result
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for word in words:
        assert word in err, err


def test_a_kind_that_does_not_exist_is_a_usage_error_naming_the_kinds(store, capsys) -> None:
    _one_line_exit_2(
        run(capsys, "log", "alpha", "--store", str(store), "--kind", "handof"),
        "'handof'",
        "handoff",
        "checkpoint-committed",
    )
    _one_line_exit_2(
        run(capsys, "log", "alpha", "--store", str(store), "--kind", "usage", "--kind", "nope", "--json"),
        "'nope'",
    )
    # a real kind the session does not hold: an empty listing
    assert run(capsys, "log", "alpha", "--store", str(store), "--kind", "usage")[0] == 0


def test_checkpoints_of_an_unknown_session_is_a_usage_error(store, capsys) -> None:
    _one_line_exit_2(run(capsys, "checkpoints", "nobody", "--store", str(store)), "no session 'nobody'")
    _one_line_exit_2(run(capsys, "checkpoints", "nobody", "--store", str(store), "--json"), "nobody")


@pytest.mark.parametrize("until", ["0", "-3"])
def test_replay_until_below_1_says_so_not_that_the_session_is_missing(store, capsys, until) -> None:
    code, out, err = run(capsys, "replay", "alpha", "--store", str(store), "--until", until)
    _one_line_exit_2((code, out, err), f"--until {until}")
    assert "no session" not in err
    code, out, _ = run(capsys, "replay", "alpha", "--store", str(store), "--until", "1", "--json")
    assert code == 0 and '"last_seq":1' in out


def test_log_ranges_that_cannot_list_anything_are_usage_errors(store, capsys) -> None:
    _one_line_exit_2(run(capsys, "log", "alpha", "--store", str(store), "--from", "0"), "--from 0")
    _one_line_exit_2(run(capsys, "log", "alpha", "--store", str(store), "--from", "3", "--to", "2"), "--to 2")
    assert run(capsys, "log", "alpha", "--store", str(store), "--from", "3", "--to", "3")[0] == 0


@pytest.mark.parametrize("make", ["file", "dev-null", "loop", "under-a-file"])
def test_a_path_that_is_no_store_is_one_line_exit_2(tmp_path, capsys, make) -> None:
    path = {
        "file": tmp_path / "f",
        "dev-null": Path("/dev/null"),
        "loop": tmp_path / "loop",
        "under-a-file": tmp_path / "f" / "store",
    }[make]
    (tmp_path / "f").write_text("not a store")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    for command in (
        ["sessions"],
        ["log", "alpha"],
        ["checkpoints", "alpha"],
        ["replay", "alpha"],
        ["context", "alpha"],
    ):
        _one_line_exit_2(run(capsys, *command, "--store", str(path)), "no cairn store")


@pytest.fixture
def writer(store: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the store for writing, until its stdin closes."""
    code = (
        "import sys\nfrom cairn.store import Journal\nwith Journal.open(sys.argv[1]):\n"
        "    print('open', flush=True)\n    sys.stdin.read()\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", code, str(store)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        assert child.stdout is not None and child.stdout.readline() == "open\n"
        yield child
        assert child.stdin is not None
        child.stdin.close()
        assert child.wait(30) == 0


def test_a_second_writer_gets_one_line_and_exit_2(store, writer, capsys) -> None:
    _one_line_exit_2(run(capsys, "reindex", "--store", str(store)), "StoreLocked", str(writer.pid))
    _one_line_exit_2(
        run(capsys, "demo", "--store", str(store), "--sessions", "1", "--turns", "1"), "StoreLocked"
    )
    assert not (store / "demo-workspaces").exists()  # refused before anything was written
    assert run(capsys, "sessions", "--store", str(store))[0] == 0  # readers take no lock


def _as_unprivileged() -> list[str]:
    """A command prefix that drops root (whose reads ignore permissions), or none when not root."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv")
    return [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]


def test_an_unreadable_store_is_one_line_exit_2(store) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="cairn-unreadable-"))  # not under pytest's private tmp
    try:
        scratch.chmod(0o755)
        locked = scratch / "store"
        shutil.copytree(store, locked)
        locked.chmod(0o000)
        for command in (["sessions"], ["log", "alpha"], ["demo", "--sessions", "1", "--turns", "1"]):
            done = subprocess.run(
                [*_as_unprivileged(), str(CAIRN), *command, "--store", str(locked)],
                capture_output=True,
                text=True,
                timeout=120,
                cwd=scratch,
                env={**os.environ, "CAIRN_CPU": "off"},
            )
            assert done.returncode == 2, (command, done.stderr)
            assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
            assert "Permission denied" in done.stderr, done.stderr
    finally:
        (scratch / "store").chmod(0o755)
        shutil.rmtree(scratch)


def test_the_demo_on_a_store_with_a_corrupt_line_is_one_line_and_exit_1(tmp_path, capsys) -> None:
    """A problem the store holds is not "could not run" (2): the demo says it in one line, exit 1, as
    verify does; seen from outside when a flipped digit in an old line ended the demo with 2."""
    store = tmp_path / "store"
    # too short to show everything the demo is for (exit 1); it ran, and wrote the session
    assert run(capsys, "demo", "--store", str(store), "--sessions", "1", "--turns", "2")[0] in (0, 1)
    segment = sorted((store / "log").glob("*.jsonl"))[0]
    data = segment.read_bytes()
    first_ask = data.index(b'"kind":"user-message"')
    at = data.index(b'"text":"', first_ask) + len(b'"text":"')
    segment.write_bytes(data[:at] + (b"X" if data[at : at + 1] != b"X" else b"Y") + data[at + 1 :])
    code, _, err = run(capsys, "demo", "--store", str(store), "--sessions", "1", "--turns", "1")
    assert code == 1
    assert "CorruptionError" in err and "checksum" in err
    assert run(capsys, "verify", "--store", str(store))[0] == 1
