"""A deliberately faulty MCP server over stdio, for `McpTools`' fault tests: raw JSON-RPC lines, no SDK.

    python -m tests.mcp.faulty_server STATE_DIR

It answers the initialize handshake and `tools/list` like any server (tools
`peek`, annotated read-only, `poke` and `grow`; after `grow` was called, `grown`
too, announced with `notifications/tools/list_changed`). What a call of
`poke` does comes from the file `STATE_DIR/mode`, read at each call:

| mode        | on a call of `poke`                                       |
|-------------|-----------------------------------------------------------|
| `ok`        | answers `poked <n>`                                       |
| `crash`     | the process exits at once (status 3), mode set to `ok`    |
| `hang`      | never answers                                             |
| `garbage`   | writes a line that is not JSON, then never answers        |

It writes its pid to `STATE_DIR/pids` (one line per start) so the tests can
see it started again, and that it is gone after a close.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

STATE = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(".")
TOOLS = [
    {
        "name": "peek",
        "description": "Look.",
        "inputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": True},
    },
    {"name": "poke", "description": "Poke.", "inputSchema": {"type": "object"}},
    {"name": "grow", "description": "Add a tool.", "inputSchema": {"type": "object"}},
]
GROWN = {"name": "grown", "description": "Added later.", "inputSchema": {"type": "object"}}


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def answer(request: dict[str, Any], result: dict[str, Any]) -> None:
    send({"jsonrpc": "2.0", "id": request["id"], "result": result})


def text(value: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}], "isError": False}


def main() -> int:
    with open(STATE / "pids", "a", encoding="ascii") as pids:
        pids.write(f"{os.getpid()}\n")
    grown = False
    pokes = 0
    for line in sys.stdin:
        request = json.loads(line)
        method = request.get("method", "")
        if "id" not in request:
            continue  # a notification (initialized, cancelled)
        if method == "initialize":
            answer(
                request,
                {
                    "protocolVersion": request["params"]["protocolVersion"],
                    "capabilities": {"tools": {"listChanged": True}},
                    "serverInfo": {"name": "faulty", "version": "1"},
                },
            )
        elif method == "tools/list":
            answer(request, {"tools": [*TOOLS, *([GROWN] if grown else [])]})
        elif method == "tools/call":
            name = request["params"]["name"]
            if name == "peek":
                answer(request, text("peeked"))
            elif name == "grow":
                grown = True
                answer(request, text("grew"))
                send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
            elif name in ("poke", "grown"):
                mode = (STATE / "mode").read_text().strip() if (STATE / "mode").exists() else "ok"
                if mode == "crash":
                    (STATE / "mode").write_text("ok")
                    os._exit(3)
                if mode == "hang":
                    continue
                if mode == "garbage":
                    sys.stdout.write("this is not json {\n")
                    sys.stdout.flush()
                    continue
                pokes += 1
                answer(request, text(f"poked {pokes}"))
            else:
                send(
                    {
                        "jsonrpc": "2.0",
                        "id": request["id"],
                        "error": {"code": -32602, "message": f"no tool {name}"},
                    }
                )
        else:
            send(
                {
                    "jsonrpc": "2.0",
                    "id": request["id"],
                    "error": {"code": -32601, "message": f"no method {method}"},
                }
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
