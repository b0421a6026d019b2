"""`cairn demo`: concurrent agent sessions on the embedded scripted provider, from first turn to replay.

    cairn demo [--store DIR] [--sessions N] [--turns M] [--provider scripted|openai|anthropic] [--json]
    cairn demo --cluster [--store DIR] [--sessions 12] [--turns 6] [--json]

(`--cluster`: the same agent's sessions on a 3-node NATS JetStream cluster
with 3 host processes, through a host SIGKILL and a node stop: `cluster`.)

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
`--provider anthropic` does the same on Anthropic's Messages API (or a
server that speaks it), with the same variables (`ANTHROPIC_API_KEY` and
`ANTHROPIC_BASE_URL` are read too; see `actors.provider.config`).

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
   the hand-off band and compacted.
Otherwise it exits 1: the run did not do what it says. It exits 2, with one
line on stderr, when it could not run: a `--store` that cannot be a
directory, a store another process writes (`StoreLocked`), an endpoint not
configured, or a store that failed during the run (a full disk): the sessions
stop, and a later run on the same store recovers from the log.

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
from cairn.actors import placement
from cairn.actors.provider.config import ProviderConfigError
from cairn.demo.agent import SETTINGS
from cairn.demo.driver import run
from cairn.demo.errors import DemoSetupError, DemoStoreFailed
from cairn.demo.logs import HeldLogs
from cairn.demo.providers import anthropic_setup, openai_setup, scripted_setup
from cairn.demo.terminal import render
from cairn.events.errors import CairnError

__all__ = ["SETTINGS", "main", "render", "run"]

DEFAULT_SESSIONS = 8
DEFAULT_TURNS = 12


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


def main(argv: Sequence[str] | None = None) -> int:
    """`cairn demo`: run it, print the report; the exit status of the module doc (0, 1 or 2)."""
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
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="on a 3-node NATS cluster with 3 host processes, through a host SIGKILL and a node stop "
        "(scripted provider; see cairn.demo.cluster)",
    )
    args = parser.parse_args(argv)
    if args.cluster:
        if args.provider != "scripted":
            parser.error("--cluster runs the scripted provider only")
        if (args.sessions is not None and args.sessions < 1) or (args.turns is not None and args.turns < 1):
            parser.error("--sessions and --turns must be at least 1")
        from cairn.demo.cluster_cli import main_cluster

        return main_cluster(args.store, args.sessions, args.turns, as_json=args.json)
    args.sessions = DEFAULT_SESSIONS if args.sessions is None else args.sessions
    args.turns = DEFAULT_TURNS if args.turns is None else args.turns
    if args.sessions < 1 or args.turns < 1:
        parser.error("--sessions and --turns must be at least 1")
    try:
        placed = placement.place_from_env()  # left to the OS, unless CAIRN_CPU asks for one CPU or batch
        endpoints = {"openai": openai_setup, "anthropic": anthropic_setup}
        setup = endpoints[args.provider]() if args.provider in endpoints else scripted_setup()
    except (ProviderConfigError, DemoSetupError, placement.PlacementError) as error:
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
        return 2
    finally:
        setup.close()
    report["placement"], report["cpu"] = placed.mode, placed.cpu
    report["warnings"] = held.lines()
    for line in report["warnings"]:
        print(f"cairn demo: warning: {_console.printable(line)}", file=sys.stderr)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        render(report)
    return 0 if report["ok"] else 1
