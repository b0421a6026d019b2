"""`cairn demo --mcp` (issue 26 point 5): the demo's sessions with the MCP reference filesystem server's
tools (run with Node through npx, from the npm registry), and the demo's health checks."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from cairn.events.kinds import ToolResult
from cairn.store import Journal

pytestmark = pytest.mark.skipif(shutil.which("npx") is None, reason="Node's npx is not installed")


def test_the_demo_with_mcp_tools_is_healthy_and_its_tool_results_name_the_server(tmp_path: Path) -> None:
    store = tmp_path / "store"
    done = subprocess.run(
        [sys.executable, "-m", "cairn.cli", "demo", "--mcp", "--store", str(store), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["ok"] and report["unhealthy_because"] == []
    assert report["turns_completed"] == report["turns_sent"] == 96
    assert report["replayed_identically"] == 8
    assert all(report["seen"].values()), report["seen"]
    assert "server-filesystem" in report["endpoint"]
    with Journal.open(store, readonly=True) as journal:
        results = [r.event for r in journal.read("demo-1") if isinstance(r.event, ToolResult)]
    assert results and all(e.server == "fs" and e.tool_name == f"fs__{e.server_tool}" for e in results)
    assert {e.server_tool for e in results} == {
        "list_directory",
        "read_text_file",
        "search_files",
        "write_file",
    }
    assert all(e.status == "ok" for e in results)
    notes = sorted((store / "demo-workspaces" / "demo-1" / "notes").iterdir())
    assert notes, "the server wrote the agent's notes"
