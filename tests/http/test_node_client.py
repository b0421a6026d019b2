"""The HTTP API driven by a client nobody here wrote (issue 25 point 6): a Node host with an npm SSE parser.

`tests/http/node/client.mjs` uses only `fetch` and `eventsource-parser`
(from the npm registry, pinned in `package.json`): it creates a session with
a tool its client runs, streams the turn, drops the connection after three
events, resumes with `Last-Event-ID`, posts the tool's result when the turn
waits for it, and prints what it saw. The events are checked against
`cairn log --json`: every record a client may see, once, in order, none
missed across the drop.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cairn import Reply, ScriptedProvider, WorkspaceTools
from cairn.actors.http.client_tools import ClientTools
from cairn.events.model import ToolCall
from tests.http.helpers import ApiServer
from tests.npm import npm_install

NODE_DIR = Path(__file__).with_name("node")
HIDDEN = {"handoff", "owner-changed"}  # never streamed to a client (H6)

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or shutil.which("npm") is None, reason="Node and npm are not installed"
)


def _installed(tmp_path: Path) -> Path:
    """The client and its one dependency, installed from the npm registry into a folder of its own."""
    return npm_install(NODE_DIR, tmp_path / "node", "client.mjs")


def test_a_node_host_streams_a_turn_with_a_client_tool_drops_the_connection_and_resumes(
    tmp_path: Path,
) -> None:
    client = _installed(tmp_path)
    provider = ScriptedProvider(
        turns=(
            Reply(
                text="Asking your device.", tool_calls=(ToolCall("c-1", "get_weather", '{"city": "Paris"}'),)
            ),
            Reply(text="It is sunny in Paris, 24 C."),
        )
    )
    api = ApiServer(tmp_path / "store", tmp_path / "ws", provider, tools=ClientTools(WorkspaceTools()))
    try:
        ran = subprocess.run(
            ["node", "client.mjs", api.url, "s1"], cwd=client, capture_output=True, text=True, timeout=120
        )
    finally:
        api.stop()
    assert ran.returncode == 0, ran.stderr[-3000:]
    seen = json.loads(ran.stdout)
    events = seen["events"]
    assert seen["accepted"]["message_seq"] == 2 and seen["resumed_after"] == events[2]["id"]
    records = [e for e in events if "." not in e["id"]]
    logged = subprocess.run(
        [sys.executable, "-m", "cairn.cli", "log", "s1", "--store", str(tmp_path / "store"), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert logged.returncode == 0, logged.stderr
    lines = [json.loads(line) for line in logged.stdout.splitlines()]
    visible = [(str(line["seq"]), line["kind"]) for line in lines if line["kind"] not in HIDDEN]
    assert [(e["id"], e["event"]) for e in records] == visible  # every record, once, in order
    result = next(line for line in lines if line["kind"] == "tool-result")
    assert result["call_id"] == "c-1" and result["content"] == [{"type": "text", "text": "sunny, 24 C"}]
    assert events[-1]["event"] == "turn-completed" and events[-1]["data"]["session"] == "s1"
