"""`McpTools` when a server misbehaves (issue 26 point 2), with a faulty server of our own
(`faulty_server.py`): a crash, a hang and garbage each give the model an error result within the call
timeout and the server is started again; a tools-changed notice lists the tools again; no server
process outlives its executor, nor the process that ran it when that one is killed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from cairn.actors.mcp_tools import McpServer, McpTools
from cairn.actors.tools import ToolInvocation, ToolOutcome
from cairn.events.model import ToolCall

ROOT = Path(__file__).resolve().parents[2]
CALL_TIMEOUT_S = 2.0
WAIT_S = 30.0


def _server(state: Path) -> McpServer:
    return McpServer(
        name="f", command=sys.executable, args=("-m", "tests.mcp.faulty_server", str(state)), cwd=str(ROOT)
    )


@pytest.fixture
def state(tmp_path: Path) -> Path:
    (tmp_path / "mode").write_text("ok")
    return tmp_path


@pytest.fixture
def faulty(state: Path) -> Iterator[McpTools]:
    with McpTools([_server(state)], call_timeout_s=CALL_TIMEOUT_S) as tools:
        yield tools


def _call(tools: McpTools, name: str) -> ToolOutcome:
    return tools(ToolInvocation(session="s", workspace="/tmp", turn_id="t", call=ToolCall("c", name, "{}")))


def _until(condition: Callable[[], bool], what: str) -> None:
    """Poll a server's state (a process starting again: nothing to wait on) until `WAIT_S`."""
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {WAIT_S} s: {what}"
        time.sleep(0.05)


def _pids(state: Path) -> list[int]:
    return [int(line) for line in (state / "pids").read_text().split()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()


@pytest.mark.parametrize("mode", ["crash", "hang", "garbage"])
def test_a_server_that_crashes_hangs_or_writes_garbage_gives_an_error_in_time_and_is_started_again(
    faulty: McpTools, state: Path, mode: str
) -> None:
    assert _call(faulty, "f__poke").content == "poked 1"
    (state / "mode").write_text(mode)
    began = time.monotonic()
    failed = _call(faulty, "f__poke")
    took = time.monotonic() - began
    assert failed.status == "error" and failed.effect == "write", failed
    assert took < CALL_TIMEOUT_S + 2.0, f"the error came after {took:.1f} s"
    (state / "mode").write_text("ok")
    _until(lambda: _call(faulty, "f__peek").content == "peeked", "the server answers again")
    assert len(_pids(state)) == 2  # a process of its own, started again
    assert _call(faulty, "f__poke").content == "poked 1"


def test_a_server_that_says_its_tools_changed_is_listed_again(faulty: McpTools) -> None:
    names = lambda: [json.loads(s)["function"]["name"] for s in faulty.schemas]  # noqa: E731
    assert names() == ["f__grow", "f__peek", "f__poke"] and faulty.read_only == ("f__peek",)
    assert _call(faulty, "f__grow").content == "grew"
    _until(lambda: "f__grown" in names(), "the new tool is listed")
    assert _call(faulty, "f__grown").content == "poked 1"


def test_no_server_process_outlives_its_executor(state: Path) -> None:
    with McpTools([_server(state)], call_timeout_s=CALL_TIMEOUT_S) as tools:
        assert _call(tools, "f__peek").content == "peeked"
        (pid,) = _pids(state)
        assert _alive(pid)
    _until(lambda: not _alive(pid), "the server process ends with close()")


def test_no_server_process_outlives_a_killed_host(state: Path) -> None:
    """The process that ran the executor is SIGKILLed (no close): the server sees its stdin close."""
    code = (
        "import sys; from cairn.actors.mcp_tools import McpServer, McpTools\n"
        "args = ('-m', 'tests.mcp.faulty_server', sys.argv[1])\n"
        "tools = McpTools([McpServer(name='f', command=sys.executable, args=args, cwd=sys.argv[2])])\n"
        "print('ready', flush=True); sys.stdin.read()\n"
    )
    argv = [sys.executable, "-c", code, str(state), str(ROOT)]
    host = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert host.stdout is not None and host.stdout.readline().strip() == "ready"
        (pid,) = _pids(state)
        assert _alive(pid)
        host.send_signal(signal.SIGKILL)
        host.wait(WAIT_S)
        _until(lambda: not _alive(pid), "the server process ends with its host")
    finally:
        if host.poll() is None:
            host.kill()
