"""What came from a conversation is shown on a terminal, never acted on (control sequences, rich markup).

A session whose every text field carries terminal control sequences (an OSC
title change ended by BEL, a screen clear, an 8-bit CSI, a right-to-left
override, backspaces, a carriage return) and rich markup is listed by every
read command: as plain text (a pipe), as rich tables (a terminal: the
code's own switch, and a real pseudo-terminal), and as JSON. No output may
carry one of those sequences raw; the markup must appear as written; JSON
must decode to the very text.
"""

from __future__ import annotations

import errno
import json
import os
import pty
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from cairn import _console, cli, demo
from cairn.events.kinds import (
    AssistantMessage,
    CompactionFailed,
    Handoff,
    ProviderError,
    Request,
    SessionStarted,
    ToolResult,
    TurnFailed,
    TurnStarted,
    Usage,
    UserMessage,
)
from cairn.events.model import TextPart, ToolCall
from cairn.store import Journal

CAIRN = Path(sys.executable).parent / "cairn"
MARKUP = "[bold red]alarm[/] :smile:"
HOSTILE = f"{MARKUP} \x1b]0;pwned\x07 \x1b[2J\x9b31m \u202eevil\u202c back\x08\x08 cr\rend \x7f\u2028"
#: byte sequences a terminal acts on; none may reach the output raw
RAW = (
    b"\x1b]0;",
    b"\x1b[2J",
    b"\x07",
    b"\x08",
    b"\r",
    b"\x7f",
    "\x9b".encode(),
    "\u202e".encode(),
    "\u2028".encode(),
)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    call = ToolCall("c1", "read", json.dumps({"path": HOSTILE}))
    events = [
        SessionStarted(workspace=f"/w/{HOSTILE}", model=f"model {HOSTILE}", context_window=32_000),
        UserMessage(message_id="u1", content=(TextPart(HOSTILE),)),
        TurnStarted(turn_id="t1", message_id="u1"),
        Request(
            request_id="r1",
            turn_id="t1",
            attempt=1,
            fingerprint="f",
            history_revision=0,
            projected_tokens=10,
            phase="normal",
            message_count=2,
        ),
        AssistantMessage(message_id="a1", request_id="r1", text=HOSTILE, tool_calls=(call,)),
        Usage(request_id="r1", prompt_tokens=10, completion_tokens=5, total_tokens=15),
        ToolResult(call_id="c1", tool_name="read", status="ok", effect="read", content=(TextPart(HOSTILE),)),
        ProviderError(request_id="r2", error_class="bad-request", output_delivered=False, message=HOSTILE),
        TurnFailed(turn_id="t1", phase="provider", error_class="bad-request", error=HOSTILE),
        Handoff(epoch=0, record=msgspec.Raw(json.dumps({"version": 1, "note": HOSTILE}).encode())),
        CompactionFailed(epoch=0, attempt=1, reason="error", consecutive_failures=1, detail=HOSTILE),
    ]
    with Journal.open(root) as journal:
        journal.append("s", events, expected_seq=0)
    return root


COMMANDS = (["sessions"], ["log", "s"], ["replay", "s"], ["context", "s"], ["checkpoints", "s"])


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    return [text for item in value for text in _strings(item)] if isinstance(value, list) else []


def _assert_nothing_raw(out: bytes, where: Any) -> None:
    for raw in RAW:
        assert raw not in out, (where, raw, out)


@pytest.mark.parametrize("tty", [False, True], ids=["plain", "tty"])
def test_tables_show_control_sequences_escaped_and_markup_as_written(
    store: Path, tty: bool, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    if tty:  # the code's own switch: rich tables when stdout is a terminal
        monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
        monkeypatch.setenv("COLUMNS", "1000")  # a wide terminal: no cell is folded
    for command in COMMANDS:
        code = cli.main([*command, "--store", str(store)])
        out = capsys.readouterr().out.encode()
        assert code == 0, command
        _assert_nothing_raw(out, command)
        if not tty:
            assert b"\x1b" not in out, command  # no ESC at all, not even a style
        if command[0] in ("log", "replay", "context"):
            assert MARKUP.encode() in out and b"\\x1b]0;pwned\\x07" in out, (command, out)
            assert b"\\u202eevil" in out, command


def test_json_output_carries_the_text_exactly_and_nothing_a_terminal_acts_on(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for command in COMMANDS:
        assert cli.main([*command, "--store", str(store), "--json"]) == 0
        out = capsys.readouterr().out
        _assert_nothing_raw(out.encode(), command)
        assert "\x1b" not in out
        documents = [json.loads(line) for line in out.splitlines()]
        if command[0] != "checkpoints":  # the session has none
            assert any(HOSTILE in text for text in _strings(documents)), command
    cli.main(["log", "s", "--store", str(store), "--json", "--kind", "user-message"])
    line = json.loads(capsys.readouterr().out)
    assert line["content"][0]["text"] == HOSTILE


def _through_a_pty(argv: list[str]) -> bytes:
    """stdout of a command run on a real pseudo-terminal."""
    primary, secondary = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "200"}
    env.pop("NO_COLOR", None)
    with subprocess.Popen(argv, stdout=secondary, stderr=subprocess.PIPE, env=env) as child:
        os.close(secondary)
        chunks = []
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError as error:  # EIO: the child closed the terminal
                if error.errno != errno.EIO:
                    raise
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert child.wait(60) == 0, child.stderr.read() if child.stderr else b""
    os.close(primary)
    return b"".join(chunks)


@pytest.mark.parametrize("command", [["replay", "s"], ["log", "s"]], ids=["replay", "log"])
def test_a_real_terminal_gets_escaped_text(store: Path, command: list[str]) -> None:
    out = _through_a_pty([str(CAIRN), *command, "--store", str(store)])
    assert b"\x1b[" in out  # rich did draw for a terminal (its own styles)
    _assert_nothing_raw(out.replace(b"\r\n", b"\n"), "pty")  # the pty turns each \n into \r\n
    assert MARKUP.encode() in out and b"\\x1b]0;pwned\\x07" in out


def test_printable_escapes_every_non_printable_character() -> None:
    shown = _console.printable("a\x1bb\x07\x9b\u202e\t\n\x00é😀 z")
    assert shown == "a\\x1bb\\x07\\x9b\\u202e\\t\\n\\x00é😀 z"
    assert _console.printable("\U000e0001\ue000") == "\\U000e0001\\ue000"  # a tag, private use
    text = "x\x7f\x9b\u202e\u2028\U000e0001"
    line = _console.json_line(msgspec.json.encode({"t": text}))
    assert line.isascii() and line.isprintable() and json.loads(line) == {"t": text}


def test_the_demo_report_escapes_what_a_provider_said(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    problem = {
        "turn": 3,
        "status": "failed",
        "phase": "provider",
        "error_class": "bad-request",
        "error": HOSTILE,
        "reason": f"failed in provider: bad-request: {HOSTILE}",
    }
    session = {
        "session": "demo-1",
        "turns": 3,
        "requests": 3,
        "tokens": None,
        "responses": 2,
        "responses_without_usage": 2,
        "handoffs": 0,
        "checkpoints": [],
        "failures": ["provider"],
        "provider_errors": 1,
        "replayed": True,
        "sent": 1,
        "completed": 0,
        "problems": [problem],
        "crossed_handoff": False,
    }
    report = {
        "provider": "openai",
        "endpoint": f"http://x/{HOSTILE}",
        "model": HOSTILE,
        "context_window": 16000,
        "store": f"/tmp/{HOSTILE}",
        "sessions": 1,
        "turns_per_session": 1,
        "continued_sessions": 0,
        "run_seconds": 1.0,
        "turns_sent": 1,
        "turns_completed": 0,
        "replayed_identically": 1,
        "seen": {"compaction in every session": False},
        "observed": {"provider tokens": None},
        "ok": False,
        "reports": [session],
        "unhealthy_because": ["1 of 1 turns did not complete"],
        "placement": "os",
        "cpu": None,
    }
    for tty in (False, True):
        monkeypatch.setattr(sys.stdout, "isatty", lambda tty=tty: tty)
        demo.render(report)
        out = capsys.readouterr().out.encode()
        _assert_nothing_raw(out, tty)
        assert MARKUP.encode() in out and b"unknown" in out
