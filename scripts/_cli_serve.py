"""`cairn serve --nats URL`: run one host of a cairn cluster until SIGTERM or SIGINT.

The host (`cairn.actors.cluster.ClusterHost`) serves the turns clients send
with `cairn.ClusterClient`, with the provider and tools of `cairn demo`
(`--provider scripted`, the default, offline; or `openai`: the endpoint of
the `CAIRN_*` variables) and `WorkspaceTools`. It prints one line when it
serves (`cairn serve: host <id> serving ...`) and one when it stopped.

SIGTERM or SIGINT: stop taking messages, let the turns in flight finish
for up to `--grace` seconds (those still running then end interrupted, in
the log), release every lease (another host takes the sessions at once),
close; exit 0. Exit 2 when it cannot start (no cluster at the URL, a bad
host id or TTL, a provider that is not configured).
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
import types
from typing import Any

from cairn._cli_base import EXIT_OK, EXIT_USAGE, UsageError
from cairn._cli_output import warn


def add_serve(sub: Any, common: argparse.ArgumentParser) -> None:
    """The `serve` subcommand and its options."""
    p = sub.add_parser("serve", parents=[common], help="run a host of a cluster until SIGTERM (--nats URL)")
    p.add_argument(
        "--nats",
        default=os.environ.get("CAIRN_NATS") or None,
        metavar="URL",
        help="the cluster: nats://host:port[,nats://...] (default: $CAIRN_NATS)",
    )
    p.add_argument(
        "--host-id", default=None, metavar="ID", help="unique per process (default: host-pid-random)"
    )
    p.add_argument(
        "--lease-ttl", type=int, default=None, metavar="S", help="session lease TTL in seconds (15)"
    )
    p.add_argument(
        "--grace", type=float, default=10.0, metavar="S", help="on SIGTERM, wait this long for turns"
    )
    p.add_argument(
        "--nats-layout",
        default=os.environ.get("CAIRN_NATS_LAYOUT") or None,
        metavar="NAME",
        help="serve the cluster store of layout NAME, with leases and subjects of its own "
        "(as the read commands' --nats-layout; default: $CAIRN_NATS_LAYOUT, else the standard one)",
    )
    p.add_argument(
        "--provider",
        choices=("scripted", "openai"),
        default="scripted",
        help="scripted (offline, default) or openai: the endpoint of the CAIRN_* variables",
    )
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    """Serve until SIGTERM/SIGINT (see the module doc)."""
    from cairn.actors.cluster import ClusterHost, ClusterNames
    from cairn.actors.tools import WorkspaceTools
    from cairn.demo.providers import openai_setup, scripted_setup
    from cairn.store.jetstream.lease_policy import DEFAULT_TTL_S

    if not args.nats:
        raise UsageError("cairn serve needs the cluster: --nats URL (or $CAIRN_NATS)")
    stop = threading.Event()
    previous = _on_signals(stop)
    try:
        setup = scripted_setup() if args.provider == "scripted" else openai_setup()
        names = ClusterNames.named(args.nats_layout) if args.nats_layout else ClusterNames()
        ttl = args.lease_ttl if args.lease_ttl is not None else DEFAULT_TTL_S
        try:
            host = ClusterHost.open(
                args.nats,
                host_id=args.host_id,
                names=names,
                ttl_s=ttl,
                settings=setup.settings,
                provider_factory=setup.adapter_for,
                tools=WorkspaceTools(),
            )
        except Exception as exc:
            setup.close()
            if isinstance(exc, ValueError):  # bad host id, TTL: InputError (a ValueError)
                raise
            warn(f"cairn serve: cannot serve on {args.nats}: {type(exc).__name__}: {exc}")
            return EXIT_USAGE
        print(f"cairn serve: host {host.host_id} serving on {args.nats} (lease TTL {ttl} s)", flush=True)
        stop.wait()
        host.close(grace_s=args.grace)
        setup.close()
        stats = host.stats
        print(
            f"cairn serve: host {host.host_id} stopped: {stats.served} turns served, "
            f"{stats.forwarded} forwarded, {stats.claimed} sessions taken; leases released",
            flush=True,
        )
        return EXIT_OK
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _on_signals(stop: threading.Event) -> dict[signal.Signals, Any]:
    """SIGTERM and SIGINT set `stop` (the main thread waits on it); the previous handlers, to restore."""

    def handler(signum: int, frame: types.FrameType | None) -> None:
        stop.set()

    return {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
