"""`cairn demo --mcp`: the scripted demo whose sessions' tools are the MCP reference filesystem server's.

The server (`@modelcontextprotocol/server-filesystem`, pinned below) runs
with Node through `npx` (which fetches it from the npm registry the first
time), as one stdio server of `McpTools`, allowed the demo's workspaces
folder only. The scripted agent calls its tools (`fs__list_directory`,
`fs__read_text_file`, `fs__search_files`, `fs__write_file`) with the
session's folder (`agent.mcp_call`); the run, its faults and its health
checks are the scripted demo's (`cairn.demo`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from cairn.demo.agent import SETTINGS, provider_for
from cairn.demo.errors import DemoSetupError
from cairn.demo.providers import Setup
from cairn.demo.tasks import task_text

#: the reference filesystem server, as the npm registry has it
FILESYSTEM_SERVER = "@modelcontextprotocol/server-filesystem@2026.8.31"
#: how long the server may take to start (the first run downloads it)
START_TIMEOUT_S = 300.0


def mcp_setup(store: Path) -> Setup:
    """The scripted setup with the filesystem server's tools over `store/demo-workspaces`.

    Raises `DemoSetupError` when Node's `npx` is missing, the `mcp` extra is
    not installed, or the server does not start."""
    npx = shutil.which("npx")
    if npx is None:
        raise DemoSetupError("cairn demo --mcp runs the MCP filesystem server with Node: npx is not on PATH")
    try:
        import mcp  # noqa: F401  (the extra: said here rather than as a failed server)

        from cairn.actors.mcp_tools import McpServer, McpTools
    except ImportError as exc:
        raise DemoSetupError(
            f"cairn demo --mcp needs the mcp extra (pip install 'cairn[mcp]'): {exc}"
        ) from None
    spaces = (store / "demo-workspaces").resolve()
    spaces.mkdir(parents=True, exist_ok=True)
    server = McpServer(name="fs", command=npx, args=("-y", FILESYSTEM_SERVER, str(spaces)))
    tools = McpTools([server], start_timeout_s=START_TIMEOUT_S)
    failed = tools.failures()
    if failed or not tools.schemas:
        tools.close()
        why = failed.get("fs", "it listed no tools")
        raise DemoSetupError(f"the MCP filesystem server ({FILESYSTEM_SERVER}) did not start: {why}")
    return Setup(
        provider="scripted",
        settings=SETTINGS,
        adapter_for=lambda sid: provider_for(sid, mcp_workspaces=spaces),
        message=lambda sid, turn, workspace: task_text(sid, turn),
        endpoint=f"MCP {FILESYSTEM_SERVER} over {spaces}",
        close=tools.close,
        tools=tools,
    )
