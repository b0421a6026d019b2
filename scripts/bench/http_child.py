"""The HTTP API server of `cairn bench`'s http suite, as a process of its own.

    python -m cairn.bench.http_child STORE WORKSPACES

The bench's scripted turn (a tool call, then a reply in deltas) served on a
free port of 127.0.0.1. Prints `serving URL` once it takes requests;
SIGTERM stops it.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path


async def _serve(store: Path, workspaces: Path) -> None:
    from cairn.actors.host.async_host import AsyncHost
    from cairn.actors.http.app import HttpConfig
    from cairn.actors.http.serve import HttpServer, bind_socket
    from cairn.bench.http import read_tool, turn_provider

    host = await AsyncHost.open(store, provider=turn_provider(), tools=read_tool)
    server = HttpServer(host, HttpConfig(workspaces=workspaces), bind_socket("127.0.0.1:0"), grace=1)
    print(f"serving {server.address}", flush=True)
    await server.serve()


def main(argv: list[str]) -> int:
    asyncio.run(_serve(Path(argv[0]), Path(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
