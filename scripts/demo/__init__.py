"""`cairn demo`: concurrent agent sessions on the embedded scripted provider, from first turn to replay.

    cairn demo [--store DIR] [--sessions N] [--turns M] [--provider scripted|openai|anthropic] [--json]
    cairn demo --local-model [--store DIR] [--sessions 2] [--turns 8] [--json]
    cairn demo --cluster [--store DIR] [--sessions 12] [--turns 6] [--json]
    cairn demo --http [--store DIR] [--sessions 4] [--turns 6] [--json]
    cairn demo --mcp [--store DIR] [--sessions N] [--turns M] [--json]

(`--cluster`: the same agent's sessions on a 3-node NATS JetStream cluster
with 3 host processes, through a host SIGKILL and a node stop: `cluster`.
`--http`: through the HTTP API from client processes, across a server
SIGKILL and restart: `http_demo`. `--mcp`: the sessions' tools are the MCP
reference filesystem server's, run with Node through `npx`: `mcp`.)

One host runs N sessions at once (default 8), M turns each (default 12). Every
session is a scripted coding agent working with real tools (list, read, grep,
write) on its own scratch workspace under `DIR/demo-workspaces/`. The window
is small (16,000 tokens, output cap 2,000), so sessions slim old tool output,
cross the hand-off band, and compact by LLM summary. Two faults are injected:
the third session's first summary call fails three times (503), so that
compaction falls back to the deterministic fallback; the fifth session's
provider rejects one request as too long, so it recovers reactively.

Then the host is stopped (closed, not killed), the store is reopened, and
every session must replay to exactly the state and next request it had live.
Run again on the same store, it continues the same sessions from their logs
(after a crash too: an unfinished turn is marked interrupted first).

`--provider openai` runs the same sessions against an OpenAI-compatible
endpoint configured by the `CAIRN_*` variables (`CAIRN_BASE_URL`,
`CAIRN_API_KEY`, `CAIRN_MODEL`, `CAIRN_CONTEXT_WINDOW`, optionally
`CAIRN_MAX_OUTPUT_TOKENS`; see `actors.provider.config`). The context window
must be set, since the demo sizes its turns by it: each user message carries
workspace files (and a test log) worth about a twelfth of the input budget,
so the context grows whatever the model says and, within about eight turns,
every session crosses the hand-off band and compacts through the endpoint
(an LLM summary, or the fallback when the model's summary fails the gates).
No faults are injected: what the endpoint does is reported as it happened.
`--local-model` starts llama.cpp's server with SmolLM2-135M on 127.0.0.1
(`cairn.local_model`, the `llm` extra) and runs `--provider openai` on it
with the small-model preset (`LocalPreset`): 2 sessions x 8 turns, a
4,096-token window per session and a 512-token output cap, one server slot
per session; the server is stopped when the demo ends. The same preset on
any OpenAI-compatible server: `CAIRN_CONTEXT_WINDOW=4096
CAIRN_MAX_OUTPUT_TOKENS=512 cairn demo --provider openai --sessions 2 --turns 8`.
`--provider anthropic` does the same on Anthropic's Messages API (or a
server that speaks it), with the same variables (`ANTHROPIC_API_KEY` and
`ANTHROPIC_BASE_URL` are read too; see `actors.provider.anthropic_config`).

The report lists every turn of this run that did not complete, with its
reason (rejected: the session refused the message, e.g. `WorkspaceMismatch`
on a copied store, whose sessions work in the original's workspaces;
failed: the phase and error; error: what sending raised). Tokens are what
the provider reported: `unknown` when it reported no usage, `≥` when some
responses came without it.

Exit status. The run is healthy, and the demo exits 0, when all of these hold:
1. every turn it sent (N x M) completed;
2. after reopening, every session replayed to the same state and next request;
3. the log shows what the demo is for. Scripted: a hand-off, an LLM
   checkpoint, a fallback checkpoint and a reactive recovery (they need the
   defaults' sessions and turns). OpenAI or Anthropic: every session crossed
   the hand-off band and compacted, and the model was asked for a summary
   (a checkpoint with a summary call behind it: strategy `llm`, or the
   fallback after the model's summary was refused with its reason, as a
   small model's often is, `grounding`). The report counts the LLM and
   fallback checkpoints.
Otherwise it exits 1: the run did not do what it says. It exits 2, with one
line on stderr, when it could not run: a `--store` that cannot be a
directory, a store another process writes (`StoreLocked`), an endpoint not
configured, or a store that failed during the run (a full disk): the sessions
stop, and a later run on the same store recovers from the log. A problem the
store holds (a corrupt line, acknowledged lines missing) is one line and 1:
`cairn verify` names it.

Its parts: `workspace` (the scratch repository), `tasks` (what each turn
asks), `agent` (the scripted coding agent and its faults), `providers`
(scripted, OpenAI or Anthropic), `clients` (one thread per session), `progress` and
`logs` (the live view), `driver` (`run`), `report` (the report and its
health) and `terminal` (`render`); `main` here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import lmdb

from cairn import _console
from cairn._cli_base import exit_code
from cairn.actors import placement
from cairn.actors.provider.config import ProviderConfigError
from cairn.demo.agent import SETTINGS
from cairn.demo.driver import run
from cairn.demo.errors import DemoSetupError, DemoStoreFailed
from cairn.demo.logs import HeldLogs
from cairn.demo.providers import anthropic_setup, openai_setup, scripted_setup
from cairn.demo.terminal import render
from cairn.events.errors import CairnError
from cairn.local_model import LocalModelServer, LocalModelStartFailed

__all__ = ["SETTINGS", "main", "render", "run"]

DEFAULT_SESSIONS = 8
DEFAULT_TURNS = 12


class LocalPreset:
    """`--local-model`: the small-model preset (SmolLM2-135M on 2 CPU cores in about 3 minutes).

    A 2,048-token window compacted on every turn from the fourth: a turn grows the context by
    about 400 tokens (a twelfth of the budget attached, and the model's reply), so no replacement
    could leave room for two more below the threshold (`gates.room_for`). In 4,096 tokens each
    session compacts once or twice in 8 turns, never on two turns in a row. A 384-token cap was
    slower (the model's JSON summary, bounded to 16-char lines, still ran past it)."""

    sessions = 2
    turns = 8
    context_window = 4096
    max_output_tokens = 512


def _error(error: BaseException, store: str = "") -> None:
    """The one line the demo ends with when it could not run (exit 2)."""
    message = str(error) or type(error).__name__
    if isinstance(error, DemoSetupError | DemoStoreFailed):
        pass  # the demo's own: its message is the whole story, without the class name
    elif isinstance(error, OSError):
        where = f": {error.filename}" if error.filename else f" (the store at {store})" if store else ""
        message = f"{error.strerror or type(error).__name__}{where}"
    elif isinstance(error, CairnError):
        message = f"{type(error).__name__}: {error}"
    elif isinstance(error, lmdb.Error):  # the index's disk failed where the store let LMDB's error through
        message = f"the index of the store failed: {type(error).__name__}: {error}"
    print(f"cairn demo: {_console.printable(message)}", file=sys.stderr)


def _local_server(sessions: int) -> LocalModelServer:
    """`--local-model`: llama.cpp's server with the packaged model, one slot per session, started."""
    server = LocalModelServer(context_window=LocalPreset.context_window, parallel=min(sessions, 16))
    print(
        f"cairn demo: starting llama.cpp's server with {server.model} (log: {server.log_path})",
        file=sys.stderr,
    )
    return server.start()


def _parser() -> argparse.ArgumentParser:
    """The options of `cairn demo` run as its own program (`python -m cairn.demo`)."""
    parser = argparse.ArgumentParser(prog="cairn demo", description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--store",
        default=os.environ.get("CAIRN_STORE", "./cairn-data"),
        help="store directory (default: $CAIRN_STORE or ./cairn-data)",
    )
    parser.add_argument(
        "--sessions", type=int, default=None, help="concurrent sessions (8; 12 with --cluster)"
    )
    parser.add_argument(
        "--turns", type=int, default=None, help="turns per session this run (12; 6 with --cluster)"
    )
    parser.add_argument(
        "--provider",
        choices=("scripted", "openai", "anthropic"),
        default="scripted",
        help="scripted (offline, the default), openai or anthropic: the endpoint of the CAIRN_* "
        "variables (CAIRN_BASE_URL, CAIRN_API_KEY, CAIRN_MODEL, CAIRN_CONTEXT_WINDOW)",
    )
    parser.add_argument(
        "--local-model",
        action="store_true",
        help="start llama.cpp's server with SmolLM2-135M on 127.0.0.1 (the llm extra) and run on it "
        "with the small-model preset: 2 sessions x 8 turns, a 4,096-token window, 512 output tokens",
    )
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="on a 3-node NATS cluster with 3 host processes, through a host SIGKILL and a node stop "
        "(scripted provider; see cairn.demo.cluster)",
    )
    parser.add_argument(
        "--mcp",
        action="store_true",
        help="the sessions' tools from the MCP reference filesystem server (Node's npx; the mcp extra); "
        "scripted provider",
    )
    parser.add_argument(
        "--http",
        action="store_true",
        help="through the HTTP API from client processes, across a server SIGKILL and restart "
        "(scripted provider; see cairn.demo.http_demo)",
    )
    return parser


def _main_http(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """`cairn demo --http`: the scripted provider only (`cairn.demo.http_demo`)."""
    if args.local_model or args.provider != "scripted" or args.cluster:
        parser.error("--http runs the scripted provider on one local server (no --local-model, --cluster)")
    if (args.sessions is not None and args.sessions < 1) or (args.turns is not None and args.turns < 1):
        parser.error("--sessions and --turns must be at least 1")
    from cairn.demo.http_demo import main_http

    return main_http(args.store, args.sessions, args.turns, as_json=args.json)


def _main_cluster(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """`cairn demo --cluster`: the scripted provider only (`cairn.demo.cluster_cli`)."""
    if args.local_model:
        parser.error("--cluster runs the scripted provider only, not --local-model")
    if args.provider != "scripted":
        parser.error("--cluster runs the scripted provider only")
    if (args.sessions is not None and args.sessions < 1) or (args.turns is not None and args.turns < 1):
        parser.error("--sessions and --turns must be at least 1")
    from cairn.demo.cluster_cli import main_cluster

    return main_cluster(args.store, args.sessions, args.turns, as_json=args.json)


def _local_shape(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A run on this host: its sessions and turns (the small-model preset's with --local-model)."""
    if args.local_model and args.provider not in ("scripted", "openai"):
        parser.error("--local-model runs the openai provider on its own server")
    sessions, turns = (
        (LocalPreset.sessions, LocalPreset.turns) if args.local_model else (DEFAULT_SESSIONS, DEFAULT_TURNS)
    )
    args.sessions = sessions if args.sessions is None else args.sessions
    args.turns = turns if args.turns is None else args.turns
    if args.sessions < 1 or args.turns < 1:
        parser.error("--sessions and --turns must be at least 1")


def main(argv: Sequence[str] | None = None) -> int:
    """`cairn demo`: run it, print the report; the exit status of the module doc (0, 1 or 2)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.mcp and (args.http or args.cluster or args.local_model or args.provider != "scripted"):
        parser.error(
            "--mcp runs the scripted provider on one local host (no --http, --cluster, --local-model)"
        )
    if args.http:
        return _main_http(parser, args)
    if args.cluster:
        return _main_cluster(parser, args)
    _local_shape(parser, args)
    server = None
    try:
        placed = placement.place_from_env()  # left to the OS, unless CAIRN_CPU asks for one CPU or batch
        if args.mcp:
            from cairn.demo.mcp import mcp_setup

            setup = mcp_setup(Path(args.store))
        elif args.local_model:
            server = _local_server(args.sessions)
            setup = openai_setup(server.environ(max_output_tokens=LocalPreset.max_output_tokens))
        else:
            endpoints = {"openai": openai_setup, "anthropic": anthropic_setup}
            setup = endpoints[args.provider]() if args.provider in endpoints else scripted_setup()
    except (ProviderConfigError, DemoSetupError, placement.PlacementError, LocalModelStartFailed) as error:
        if server is not None:
            server.stop()
        _error(error)
        return 2
    interactive = sys.stderr.isatty() and not args.json
    try:
        with HeldLogs() as held:
            report = run(
                Path(args.store),
                args.sessions,
                args.turns,
                show=interactive,
                plain=not interactive and not args.json,
                setup=setup,
            )
    except (DemoSetupError, DemoStoreFailed, CairnError, OSError, lmdb.Error) as error:
        _error(error, args.store)  # one line; what was logged meanwhile follows from it
        return exit_code(error)  # 1 for a problem the store holds (a corrupt line: verify names it)
    finally:
        setup.close()
        if server is not None:
            server.stop()
    report["placement"], report["cpu"] = placed.mode, placed.cpu
    report["warnings"] = held.lines()
    for line in report["warnings"]:
        print(f"cairn demo: warning: {_console.printable(line)}", file=sys.stderr)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        render(report)
    return 0 if report["ok"] else 1
