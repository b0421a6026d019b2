"""The `cairn` CLI on a real store: listings, --json, exit codes, verify and reindex."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cairn.cli import main
from cairn.events.kinds import (
    AssistantMessage,
    CheckpointCommitted,
    SessionStarted,
    TurnStarted,
    Usage,
    UserMessage,
)
from cairn.events.model import Message, TextPart
from cairn.store import Journal

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    with Journal.open(root) as journal:
        for sid in ("alpha", "beta"):
            journal.append(
                sid, [SessionStarted(workspace="/w", model="m", context_window=8000)], expected_seq=0
            )
            journal.append(
                sid,
                [
                    UserMessage(message_id="u1", content=(TextPart("hello there"),)),
                    TurnStarted(turn_id="t1", message_id="u1"),
                    AssistantMessage(message_id="a1", request_id="r1", text="hi"),
                    Usage(request_id="r1", prompt_tokens=10, completion_tokens=2, total_tokens=12),
                ],
                expected_seq=1,
            )
        journal.append(
            "alpha",
            [
                CheckpointCommitted(
                    version=1,
                    epoch=1,
                    through_seq=5,
                    trigger="manual",
                    strategy="fallback",
                    source_tokens=40,
                    replacement_tokens=8,
                    replacement_messages=(Message(role="user", content="summary"),),
                )
            ],
            expected_seq=5,
        )
    return root


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_sessions_lists_every_session_as_json(store, capsys):
    code, out, _ = run(capsys, "sessions", "--store", str(store), "--json")
    assert code == 0
    assert sorted(s["sid"] for s in json.loads(out)) == ["alpha", "beta"]


def test_log_filters_by_kind_and_range_and_emits_json_lines(store, capsys):
    code, out, _ = run(capsys, "log", "alpha", "--store", str(store), "--json", "--kind", "usage")
    assert code == 0
    lines = [json.loads(line) for line in out.splitlines()]
    assert [(x["seq"], x["kind"]) for x in lines] == [(5, "usage")]
    code, out, _ = run(capsys, "log", "alpha", "--store", str(store), "--json", "--from", "2", "--to", "3")
    assert [json.loads(line)["seq"] for line in out.splitlines()] == [2, 3]


def test_log_table_mentions_kinds(store, capsys):
    code, out, _ = run(capsys, "log", "beta", "--store", str(store))
    assert code == 0 and "user-message" in out and "hello there" in out


def test_checkpoints_and_replay(store, capsys):
    code, out, _ = run(capsys, "checkpoints", "alpha", "--store", str(store), "--json")
    assert code == 0 and json.loads(out)[0]["strategy"] == "fallback"
    code, out, _ = run(capsys, "replay", "alpha", "--store", str(store), "--json", "--until", "3")
    state = json.loads(out)
    assert code == 0 and state["last_seq"] == 3 and state["open_turn"] == "t1"


def test_unknown_session_and_missing_store_exit_2(store, tmp_path, capsys):
    assert run(capsys, "log", "nobody", "--store", str(store))[0] == 2
    assert run(capsys, "sessions", "--store", str(tmp_path / "nowhere"))[0] == 2
    code, _, err = run(capsys, "log", "../etc", "--store", str(store))
    assert code == 2 and "invalid session id" in err


def test_usage_error_exits_2(capsys):
    assert run(capsys, "no-such-command")[0] == 2


def test_verify_is_clean_then_finds_a_flipped_byte(store, capsys):
    code, out, _ = run(capsys, "verify", "--store", str(store), "--json")
    assert code == 0, out
    segment = sorted((store / "log").glob("*.jsonl"))[0]
    data = bytearray(segment.read_bytes())
    middle = data.index(b"hello there")
    data[middle] ^= 0x01
    segment.write_bytes(bytes(data))
    code, out, _ = run(capsys, "verify", "--store", str(store))
    assert code == 1
    assert segment.name in out and "alpha" in out


def test_reindex_then_verify_is_clean(store, capsys):
    for path in (store / "index").glob("*"):
        path.unlink()
    code, _, _ = run(capsys, "reindex", "--store", str(store), "--json")
    assert code == 0
    assert run(capsys, "verify", "--store", str(store))[0] == 0


def test_the_cli_runs_as_a_module_and_as_the_console_script(store):
    console = Path(sys.executable).with_name("cairn")
    for command in ([sys.executable, "-m", "cairn.cli"], [str(console)]):
        result = subprocess.run(
            [*command, "sessions", "--store", str(store), "--json"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert len(json.loads(result.stdout)) == 2


def test_context_shows_the_next_request_with_token_counts(store, capsys):
    code, out, _ = run(capsys, "context", "beta", "--store", str(store), "--json")
    assert code == 0
    data = json.loads(out)
    # window 8,000 leaves no input budget once the 8,192-token reserve is taken (B1, B2)
    assert data["input_budget"] is None and data["phase"] == "unknown"
    sent = data["messages_sent"]
    assert [m["role"] for m in sent][-2:] == ["user", "assistant"]
    assert all(m["tokens"] > 0 for m in sent)
    assert (
        data["parts"]["total"]
        == data["parts"]["system"]
        + data["parts"]["tools"]
        + data["parts"]["history"]
        + data["parts"]["handoff"]
    )
    code, out, _ = run(capsys, "context", "beta", "--store", str(store))
    assert code == 0 and "hello there" in out


def _forge_line(store: Path, sid: str, seq: int, kind: str, body: dict) -> None:
    """Append a line the way a newer cairn would write it: valid frame, crc and chain."""
    import crc32c

    from cairn.events.codec import chain_digest, decode_envelope

    segment = sorted((store / "log").glob("*.jsonl"))[-1]
    lines = segment.read_bytes().splitlines(keepends=True)
    last = next(line for line in reversed(lines) if decode_envelope(line).sid == sid)
    pos = decode_envelope(lines[-1]).pos + 1
    envelope = {
        "v": 1,
        "pos": pos,
        "sid": sid,
        "seq": seq,
        "ts": 1_800_000_000_000,
        "prev": chain_digest(last),
        "kind": kind,
        "event": {"kind": kind, **body},
    }
    prefix = json.dumps(envelope, separators=(",", ":")).encode()[:-1]
    with segment.open("ab") as f:
        f.write(prefix + b',"crc":"%08x"}\n' % crc32c.crc32c(prefix))


def test_log_lists_a_newer_kind_by_its_envelope_and_warns(store, capsys):
    _forge_line(store, "beta", 6, "from-a-newer-cairn", {"detail": 1})
    with Journal.open(store):  # a writer's open indexes the forged line like any other
        pass
    code, out, err = run(capsys, "log", "beta", "--store", str(store), "--json")
    assert code == 0
    listed = [json.loads(line) for line in out.splitlines()]
    assert [x["seq"] for x in listed] == [1, 2, 3, 4, 5, 6]
    assert listed[-1]["kind"] == "from-a-newer-cairn" and listed[-1]["unknown_kind"] is True
    assert "does not know" in err
    code, out, _ = run(capsys, "log", "beta", "--store", str(store))
    assert code == 0 and "from-a-newer-cairn" in out and "hello there" in out


def test_log_stops_at_a_corrupt_line_after_listing_what_came_before(store, capsys):
    segment = sorted((store / "log").glob("*.jsonl"))[0]
    data = bytearray(segment.read_bytes())
    line_start = data.index(b'"sid":"beta","seq":4')
    data[data.index(b'"hi"', line_start) + 1] ^= 0x01  # beta's assistant text, seq 4
    segment.write_bytes(bytes(data))
    code, out, err = run(capsys, "log", "beta", "--store", str(store))
    assert code == 1
    assert "hello there" in out and "CorruptionError" in err


def test_a_corrupt_line_found_by_reindex_is_named_listed_and_exits_1(store, capsys):
    """reindex records the corrupt line (exit 1: a problem the store holds, not a clean rebuild), says
    where it is in words, and `sessions` marks the session unreadable from it."""
    segment = sorted((store / "log").glob("*.jsonl"))[0]
    data = segment.read_bytes()
    assert data.count(b"hello there") == 2
    segment.write_bytes(data.replace(b"hello there", b"HELLO there", 1))  # alpha's seq 2
    code, out, _ = run(capsys, "reindex", "--store", str(store))
    assert code == 1
    assert f"corrupt: {segment.name}@" in out and "session alpha seq 2" in out and "{" not in out
    code, out, _ = run(capsys, "sessions", "--store", str(store))
    assert code == 0
    assert "alpha !" in out and "alpha !: unreadable from seq 2" in out and "beta !" not in out
    code, out, _ = run(capsys, "sessions", "--store", str(store), "--json")
    assert {s["sid"]: s["broken_seq"] for s in json.loads(out)} == {"alpha": 2, "beta": 0}
