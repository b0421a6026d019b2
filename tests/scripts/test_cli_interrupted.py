"""`cairn interrupted` (the turns a crash interrupted) and `--store` before or after the subcommand."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cairn import cli
from cairn.events.kinds import SessionStarted, TurnCompleted, TurnFailed, TurnStarted, UserMessage
from cairn.events.model import TextPart
from cairn.store import Journal


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """Three sessions: one finished, one interrupted (marked), one whose log ends inside a turn."""
    root = tmp_path / "store"
    with Journal.open(root) as journal:
        for sid in ("done", "marked", "open"):
            journal.append(
                sid, [SessionStarted(workspace="/w", model="m", context_window=100_000)], expected_seq=0
            )
            ask = UserMessage(message_id="u1", content=(TextPart(f"please finish {sid}\x1b[31m"),))
            journal.append(sid, [ask, TurnStarted(turn_id="t1", message_id="u1")], expected_seq=1)
        journal.append("done", [TurnCompleted(turn_id="t1", requests=1)], expected_seq=3)
        crash = TurnFailed(turn_id="t1", phase="interrupted", error_class="interrupted", error="crashed")
        journal.append("marked", [crash], expected_seq=3)
    return root


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_interrupted_lists_each_unfinished_last_turn_with_its_message(store: Path, capsys) -> None:
    code, out, _ = run(capsys, "interrupted", "--store", str(store), "--json")
    assert code == 0
    rows = json.loads(out)
    assert [(r["session"], r["state"], r["turn_id"]) for r in rows] == [
        ("marked", "interrupted", "t1"),
        ("open", "open", "t1"),
    ]
    assert rows[0]["text"] == "please finish marked\x1b[31m" and rows[0]["reason"] == "crashed"
    code, out, _ = run(capsys, "interrupted", "--store", str(store))
    assert code == 0 and "please finish open\\x1b[31m" in out and "\x1b" not in out
    assert "done" not in out.split()


def test_store_is_accepted_before_the_subcommand(store: Path, capsys) -> None:
    before = run(capsys, "--store", str(store), "sessions", "--json")
    after = run(capsys, "sessions", "--store", str(store), "--json")
    assert before[0] == after[0] == 0
    assert before[1] == after[1] and len(json.loads(before[1])) == 3
    assert run(capsys, "--store", str(store), "interrupted", "--json")[0] == 0
    same = run(capsys, "--store", str(store), "sessions", "--store", str(store), "--json")
    assert same[0] == 0 and same[1] == before[1]


def test_store_given_twice_differently_is_a_usage_error(store: Path, tmp_path: Path, capsys) -> None:
    code, out, err = run(capsys, "--store", str(store), "sessions", "--store", str(tmp_path / "other"))
    assert code == 2 and out == ""
    assert "--store given twice" in err and str(store) in err


def test_store_before_the_subcommand_beats_the_environment(store: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("CAIRN_STORE", "/nonexistent/cairn")
    code, out, _ = run(capsys, "--store", str(store), "sessions", "--json")
    assert code == 0 and len(json.loads(out)) == 3


def test_the_cli_still_starts_without_the_runtime() -> None:
    code = (
        "import sys, cairn.cli; print([m for m in ('pykka', 'cairn.actors.host.host') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_corrupt_session_is_skipped_and_the_others_are_listed(
    store: Path, capsys, caplog: pytest.LogCaptureFixture
) -> None:
    """One flipped byte in session `done` (a line with valid lines after it: corruption, not a torn
    tail) used to end the whole listing with its CorruptionError; now it is named and skipped, exit 1."""
    from cairn import Host, HostConfig

    segment = next((store / "log").glob("*.jsonl"))
    data = segment.read_bytes()
    assert data.count(b"please finish done") == 1
    segment.write_bytes(data.replace(b"please finish done", b"please finish DONE"))
    code, out, err = run(capsys, "interrupted", "--store", str(store), "--json")
    assert code == 1
    assert [r["session"] for r in json.loads(out)] == ["marked", "open"]
    assert "session done skipped" in err and "CorruptionError" not in out
    with Host.open(store, config=HostConfig(sweep=False)) as host, caplog.at_level("WARNING", "cairn.host"):
        assert [turn.session for turn in host.interrupted_turns()] == ["marked", "open"]
    assert "session done skipped" in caplog.text
