"""Every read command of `cairn`, table and --json, over a store that holds every event kind.

The store is what the demo leaves (hand-offs, slimming, LLM and fallback
checkpoints, a reactive recovery), plus what the demo never does (`tests.every_kind`): a
fork, a tool result kept as a blob, a failed turn, a cancelled one. Every command must exit 0 with
no traceback on every session, and its --json must parse (JSON Lines for
`log`). A new event kind the store does not hold fails the first test, so
the matrix keeps covering every kind.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cairn import cli, demo
from cairn._cli_read import describe
from cairn.store import Journal
from tests.every_kind import EVERY_KIND, add_the_rest

CAIRN = Path(sys.executable).parent / "cairn"  # the installed console script


@pytest.fixture(scope="module")
def demo_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("every-kind") / "store"
    report = demo.run(root, 5, 12, show=False, plain=False)
    assert report["ok"], report
    return {**report, "placement": "os", "cpu": None}


@pytest.fixture(scope="module")
def store(demo_report: dict[str, Any]) -> Path:
    root = Path(demo_report["store"])
    add_the_rest(root)
    return root


def _kinds_in(root: Path) -> set[str]:
    with Journal.open(root, readonly=True) as journal:
        return {kind for summary in journal.sessions() for kind in summary.counts}


def _sessions(root: Path) -> list[str]:
    with Journal.open(root, readonly=True) as journal:
        return [summary.sid for summary in journal.sessions()]


def test_the_store_holds_every_event_kind_a_fork_a_blob_and_checkpoints(store: Path) -> None:
    assert _kinds_in(store) >= EVERY_KIND, f"not covered: {EVERY_KIND - _kinds_in(store)}"
    assert any((store / "blobs").rglob("*")), "no blob was written"
    assert {"demo-1-fork", "extra-fork"} <= set(_sessions(store))


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(params=["plain", "tty", "json"])
def form(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Plain text (a pipe), rich tables (a terminal), or --json."""
    if request.param == "tty":
        monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    yield request.param


def _commands(sid: str, last_seq: int) -> list[list[str]]:
    return [
        ["log", sid],
        ["checkpoints", sid],
        ["replay", sid],
        ["replay", sid, "--until", str(max(1, last_seq // 2))],
        ["context", sid],
    ]


def test_every_read_command_runs_on_every_session_in_every_form(
    store: Path, form: str, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = ["--json"] if form == "json" else []
    code, out, err = run(capsys, "sessions", "--store", str(store), *extra)
    assert code == 0 and "Traceback" not in err, err
    if form == "json":
        listed = json.loads(out)
        assert {s["sid"] for s in listed} == set(_sessions(store))
    logged_kinds: set[str] = set()
    with Journal.open(store, readonly=True) as journal:
        last = {summary.sid: summary.last_seq for summary in journal.sessions()}
    for sid, last_seq in last.items():
        for command in _commands(sid, last_seq):
            code, out, err = run(capsys, *command, "--store", str(store), *extra)
            assert code == 0, (command, err)
            assert "Traceback" not in err and out, (command, err)
            if form != "json":
                continue
            if command[0] == "log":
                lines = [json.loads(line) for line in out.splitlines()]
                assert [line["seq"] for line in lines] == list(range(1, last_seq + 1))
                logged_kinds |= {line["kind"] for line in lines}
            else:
                json.loads(out)
    if form == "json":
        assert logged_kinds >= EVERY_KIND
    code, out, err = run(capsys, "verify", "--store", str(store), *extra)
    assert code == 0 and "Traceback" not in err, out + err


def test_log_lists_each_kind_alone(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--kind of every kind, on the sessions that hold it: the demo's own audit commands are of this form."""
    with Journal.open(store, readonly=True) as journal:
        holders = {kind: s.sid for s in journal.sessions() for kind in s.counts}
    for kind in sorted(EVERY_KIND):
        for extra in ([], ["--json"]):
            code, out, err = run(capsys, "log", holders[kind], "--store", str(store), "--kind", kind, *extra)
            assert code == 0 and "Traceback" not in err, (kind, err)
            if extra:
                assert {json.loads(line)["kind"] for line in out.splitlines()} == {kind}
            else:
                assert kind in out


def test_every_event_of_every_kind_is_described_in_listings(store: Path) -> None:
    described: dict[str, int] = {}
    with Journal.open(store, readonly=True) as journal:
        for sid in _sessions(store):
            for record in journal.read(sid):
                assert describe(record.event), (sid, record.seq, record.kind)
                described[record.kind] = described.get(record.kind, 0) + 1
    assert set(described) >= EVERY_KIND


def test_a_handoff_is_listed_with_its_record(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "log", "demo-1", "--store", str(store), "--kind", "handoff", "--json")
    assert code == 0
    handoffs = [json.loads(line) for line in out.splitlines()]
    assert handoffs and all(isinstance(h["record"], dict) and h["record"]["version"] == 1 for h in handoffs)


def _audit_commands(report: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> list[list[str]]:
    """The commands the demo prints under "Audit what happened", as argv lists."""
    capsys.readouterr()
    demo.render(report)
    out = capsys.readouterr().out
    printed = out.split("Audit what happened:", 1)[1].strip().splitlines()
    commands = [shlex.split(line) for line in printed]
    assert len(commands) == 8
    return commands  # run as printed (issue 27): the program as the user can run it


def test_every_command_the_demo_and_the_readme_print_runs_as_the_installed_script(
    store: Path, demo_report: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "store with space"  # a copy, as reindex writes; a space, as they are quoted
    shutil.copytree(store, copy)
    commands = _audit_commands({**demo_report, "store": str(copy)}, capsys)
    readme = [
        [
            str(CAIRN),
            "log",
            "extra",
            "--store",
            str(copy),
            "--kind",
            "tool-result",
            "--from",
            "2",
            "--to",
            "40",
        ],
        [str(CAIRN), "replay", "demo-1-fork", "--store", str(copy), "--until", "12"],
        [str(CAIRN), "checkpoints", "demo-1-fork", "--store", str(copy)],
        [str(CAIRN), "reindex", "--store", str(copy)],
        [str(CAIRN), "verify", "--store", str(copy)],
    ]
    env = {**os.environ, "CAIRN_CPU": "off"}
    for command in commands + readme:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
        assert done.returncode == 0, (command, done.stderr)
        assert "Traceback" not in done.stderr and done.stdout, (command, done.stderr)
    for command in commands[:2]:  # --json of a listing, as a script would read it
        done = subprocess.run([*command, "--json"], capture_output=True, text=True, timeout=120, env=env)
        assert done.returncode == 0 and json.loads(done.stdout), (command, done.stderr)


@pytest.mark.skipif(shutil.which("jq") is None, reason="needs jq")
def test_jq_reads_the_log_as_json_lines(store: Path) -> None:
    done = subprocess.run(
        [str(CAIRN), "log", "demo-1", "--store", str(store), "--json"],
        capture_output=True,
        timeout=120,
        env={**os.environ, "CAIRN_CPU": "off"},
    )
    assert done.returncode == 0, done.stderr
    query = 'select(.kind == "handoff") | .record.version'
    handoffs = subprocess.run(
        [shutil.which("jq") or "jq", "-c", query], input=done.stdout, capture_output=True, timeout=60
    )
    assert handoffs.returncode == 0, handoffs.stderr
    assert handoffs.stdout.split() and set(handoffs.stdout.split()) == {b"1"}
    kinds = subprocess.run(
        [shutil.which("jq") or "jq", "-r", ".kind"], input=done.stdout, capture_output=True, timeout=60
    )
    listed: Any = kinds.stdout.decode().split()
    assert kinds.returncode == 0 and {"handoff", "context-slimmed", "checkpoint-committed"} <= set(listed)


def test_log_names_the_server_and_its_tool_of_a_servers_tool_result(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 26 point 3: `cairn log` shows which server ran a call, and the tool's name there."""
    code, out, err = run(capsys, "log", "extra", "--store", str(store), "--kind", "tool-result")
    assert code == 0 and "Traceback" not in err, err
    assert "big (server bigs, tool make_big) ok/" in out
    code, out, err = run(capsys, "log", "extra", "--store", str(store), "--kind", "tool-result", "--json")
    named = [json.loads(line) for line in out.splitlines() if '"bigs"' in line]
    assert named and all(
        '"server": "bigs"' in json.dumps(n) and '"server_tool": "make_big"' in json.dumps(n) for n in named
    )


def test_the_printed_program_is_the_one_to_run_from_here_on_path_or_not(tmp_path: Path) -> None:
    """Issue 27: the demo printed bare `cairn ...`, which fails for whoever did not activate the venv.
    Off PATH it prints this environment's script (relative to the folder it runs in); on PATH, `cairn`."""
    code = "from cairn import _console; print(_console.cairn_program())"
    bare = {k: v for k, v in os.environ.items() if k != "PATH"} | {"PATH": "/usr/bin:/bin"}
    off = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=bare, cwd=tmp_path)
    program = shlex.split(off.stdout.strip())
    assert program[0] != "cairn" and (tmp_path / program[0]).resolve() == CAIRN.resolve()
    on = {**os.environ, "PATH": f"{CAIRN.parent}{os.pathsep}/usr/bin:/bin"}
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=on, cwd=tmp_path)
    assert found.stdout.strip() == "cairn"


def test_every_kind_round_trips_through_log_json(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 24 point 3: `cairn log --json` of every session, each line decoded back with the event
    union, equals the event the journal reads, for every kind; the envelope is the record's."""
    import msgspec

    from cairn import cli
    from cairn.events.kinds import Event

    envelope = ("pos", "sid", "seq", "ts")
    seen: set[str] = set()
    with Journal.open(store, readonly=True) as journal:
        for sid in _sessions(store):
            assert cli.main(["log", sid, "--store", str(store), "--json"]) == 0
            lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
            records = list(journal.read(sid))
            assert len(lines) == len(records), sid
            for line, record in zip(lines, records, strict=True):
                assert tuple(line[k] for k in envelope) == (record.pos, record.sid, record.seq, record.ts)
                body = {k: v for k, v in line.items() if k not in envelope}
                event = msgspec.json.decode(msgspec.json.encode(body), type=Event)
                assert event == record.event, (sid, record.seq, record.kind)
                seen.add(record.kind)
    assert seen == EVERY_KIND
