"""`cairn demo --cluster`'s entry: run it, print the report, the exit status; SIGTERM ends it cleanly.

Exit 0 when everything the report checks held, 1 when something did not
(the report's `problems`; also when the demo was interrupted), 2 with one
line on stderr when it could not run: no `nats-server` binary, a `--store`
that cannot be a directory, a cluster or host that did not start. Whatever
happens, the hosts and the NATS nodes it started are ended before it exits
(SIGTERM and SIGINT are turned into an exception that unwinds to them).
"""

from __future__ import annotations

import json
import signal
import sys
import types
from pathlib import Path
from typing import Any

from cairn import _console
from cairn.demo.cluster import run_cluster
from cairn.demo.cluster_render import render_cluster
from cairn.demo.errors import DemoSetupError
from cairn.store.jetstream.local_cluster import ClusterStartFailed

DEFAULT_SESSIONS = 12
DEFAULT_TURNS = 6


class Interrupted(Exception):
    """SIGTERM or SIGINT arrived: unwind, ending every process the demo started."""


def _raise_interrupted(signum: int, frame: types.FrameType | None) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):  # once: a second signal must not cut the clean-up short
        signal.signal(sig, signal.SIG_IGN)
    raise Interrupted(signal.Signals(signum).name)


def _progress(line: str) -> None:
    print(_console.printable(f"cairn demo: {line}"), file=sys.stderr, flush=True)


def main_cluster(store: str, sessions: int | None, turns: int | None, *, as_json: bool) -> int:
    """Run `cairn demo --cluster` (see the module doc); the exit status."""
    sessions = DEFAULT_SESSIONS if sessions is None else sessions
    turns = DEFAULT_TURNS if turns is None else turns
    if turns < 3:
        print(
            "cairn demo: --cluster needs --turns of at least 3 (a kill and a node stop mid-run)",
            file=sys.stderr,
        )
        return 2
    previous = {sig: signal.signal(sig, _raise_interrupted) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        report: dict[str, Any] = run_cluster(Path(store), sessions, turns, progress=_progress)
    except (DemoSetupError, ClusterStartFailed) as error:
        print(_console.printable(f"cairn demo: {error}"), file=sys.stderr)
        return 2
    except OSError as error:
        where = f": {error.filename}" if error.filename else ""
        print(
            _console.printable(f"cairn demo: {error.strerror or type(error).__name__}{where}"),
            file=sys.stderr,
        )
        return 2
    except Interrupted as signalled:
        print(
            f"cairn demo: interrupted by {signalled}; every host and NATS node it started is ended",
            file=sys.stderr,
        )
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        render_cluster(report)
    return 0 if report["ok"] else 1
