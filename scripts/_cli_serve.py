"""`cairn serve`: run a host until SIGTERM or SIGINT: one host of a cluster (`--nats URL`), or the HTTP API
on a local store (`--http HOST:PORT --store DIR`).

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

`--http HOST:PORT` serves the HTTP API (`cairn.actors.http`) on the local
store of `--store` (made when missing), or, with `--nats URL`, as one host
of that cluster (it serves cluster clients too; an operation on a session
another host holds is run by that host: `actors/http/places.py`), with the
same provider and tools;
sessions work in folders under `--workspaces` (default
`./cairn-workspaces`). It prints `cairn serve: serving http://HOST:PORT ...`
once it takes requests (port 0 picks a free port, which the line names);
on SIGTERM or SIGINT it stops taking requests, ends the event streams (a
client resumes with its last event id), lets requests in flight finish for
up to `--grace` seconds, closes the store, and exits 0.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import types
from typing import Any

from cairn._cli_base import EXIT_OK, EXIT_USAGE, UsageError
from cairn._cli_output import warn


def add_serve(sub: Any, common: argparse.ArgumentParser) -> None:
    """The `serve` subcommand and its options."""
    p = sub.add_parser(
        "serve",
        parents=[common],
        help="run a host until SIGTERM: of a cluster (--nats URL), or HTTP (--http)",
    )
    p.add_argument(
        "--http",
        default=None,
        metavar="HOST:PORT",
        help="serve the HTTP API on this address (127.0.0.1:8080; port 0: a free one) on the --store, "
        "or as a host of the --nats cluster",
    )
    p.add_argument(
        "--tenants",
        default=None,
        metavar="FILE",
        help="with --http: the tenants file (bearer token hashes and limits); without it, loopback only",
    )
    p.add_argument(
        "--workspaces",
        default=None,
        metavar="DIR",
        help="with --http: the folder the sessions' workspaces are made in (default ./cairn-workspaces)",
    )
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
        "--grace",
        type=float,
        default=10.0,
        metavar="S",
        help="on SIGTERM, give what is in flight this long to finish (with --http on a local store: the "
        "requests; a turn that no request waits for ends interrupted)",
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
    from cairn.actors.tools import WorkspaceTools
    from cairn.demo.providers import openai_setup, scripted_setup
    from cairn.store.jetstream.lease_policy import DEFAULT_TTL_S

    if args.http is not None:
        return _serve_http(args)
    if args.workspaces is not None or args.tenants is not None:
        raise UsageError("--workspaces and --tenants go with --http")
    if not args.nats:
        raise UsageError("cairn serve needs the cluster (--nats URL, or $CAIRN_NATS) or --http HOST:PORT")
    stop = threading.Event()
    previous = _on_signals(stop)
    try:
        setup = scripted_setup() if args.provider == "scripted" else openai_setup()
        ttl = args.lease_ttl if args.lease_ttl is not None else DEFAULT_TTL_S
        try:
            host = _open_cluster(args, setup, WorkspaceTools())
        except BaseException:
            setup.close()
            raise
        if host is None:
            setup.close()
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
        return leave(EXIT_OK)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _serve_http(args: argparse.Namespace) -> int:
    """The HTTP API on the local store, or as a host of the cluster (`--nats`), until SIGTERM/SIGINT
    (see the module doc)."""
    import asyncio
    import concurrent.futures
    from pathlib import Path

    from cairn.actors.host.async_host import DEFAULT_WORKERS, AsyncHost
    from cairn.actors.http.app import HttpConfig
    from cairn.actors.http.client_tools import ClientTools
    from cairn.actors.http.serve import HttpServer
    from cairn.actors.http.tenants import Tenants
    from cairn.actors.tools import WorkspaceTools
    from cairn.demo.providers import openai_setup, scripted_setup

    store = Path(args.store)
    workspaces = Path(args.workspaces if args.workspaces is not None else "cairn-workspaces").resolve()
    tenants = Tenants.load(args.tenants) if args.tenants is not None else None  # BadTenants: exit 2
    sock = _listen(args.http, loopback_only=tenants is None)
    if sock is None:
        return EXIT_USAGE
    setup = scripted_setup() if args.provider == "scripted" else openai_setup()

    tools = ClientTools(WorkspaceTools())  # the workspace tools here, a session's client tools there
    cluster = None
    try:
        if args.nats and (cluster := _open_cluster(args, setup, tools)) is None:
            return EXIT_USAGE
    finally:
        if args.nats and cluster is None:  # not opened: said, or raised (a bad host id)
            sock.close()
            setup.close()

    async def serve() -> None:
        if cluster is not None:
            host = AsyncHost(cluster.host, concurrent.futures.ThreadPoolExecutor(DEFAULT_WORKERS))
            where = f"the cluster {args.nats} as host {cluster.host_id}"
        else:
            host = await AsyncHost.open(
                store, settings=setup.settings, provider_factory=setup.adapter_for, tools=tools
            )
            where = f"the store {store}"
        config = HttpConfig(workspaces=workspaces, tenants=tenants)
        server = HttpServer(host, config, sock, grace=args.grace, tools=tools, cluster=cluster)
        about = _about(workspaces, tenants, args.tenants)
        print(f"cairn serve: serving {server.address} on {where} ({about}); SIGTERM stops", flush=True)
        await server.serve()

    try:
        asyncio.run(serve())
    finally:
        sock.close()
        setup.close()
    if cluster is not None:
        print(f"cairn serve: host {cluster.host_id} stopped; leases released", flush=True)
    else:
        print("cairn serve: stopped; the store is closed", flush=True)
    return leave(EXIT_OK)


def leave(status: int) -> int:
    """`status`, for a server that stopped cleanly (the store closed). A tool still running (Python
    cannot stop a thread) may be inside a C extension, RE2's grep among them; the interpreter's
    finalization ends such a thread by unwinding through the extension's frames, which aborts the
    process ("terminate called without an active exception", exit 134). With such threads left, the
    process ends here instead, its output flushed and its logs shut down."""
    if any(t is not threading.main_thread() and t.is_alive() for t in threading.enumerate()):
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    return status


def _about(workspaces: Any, tenants: Any, tenants_file: str | None) -> str:
    """The start line's words on the workspaces and the tenants."""
    who = (
        f"{len(tenants.tenants)} tenants of {tenants_file}"
        if tenants
        else "no tenants file: loopback only, no tokens"
    )
    return f"workspaces under {workspaces}; {who}"


def _listen(address: str, *, loopback_only: bool) -> Any:
    """The listening socket of `--http` (None, said, when it cannot be bound; `UsageError` for a bad
    address, or one that is not loopback without tenants)."""
    from cairn.actors.http.serve import bind_socket, is_loopback

    try:
        if loopback_only and not is_loopback(address):
            raise UsageError(f"without --tenants the API listens on loopback only, not {address}")
        return bind_socket(address)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        warn(f"cairn serve: cannot listen on {address}: {exc}")
        return None


def _open_cluster(args: argparse.Namespace, setup: Any, tools: Any) -> Any:
    """The `ClusterHost` of `--nats` for the HTTP API (None, said, when the cluster cannot be reached)."""
    from cairn.actors.cluster import ClusterHost, ClusterNames
    from cairn.store.jetstream.lease_policy import DEFAULT_TTL_S

    names = ClusterNames.named(args.nats_layout) if args.nats_layout else ClusterNames()
    try:
        return ClusterHost.open(
            args.nats,
            host_id=args.host_id,
            names=names,
            ttl_s=args.lease_ttl if args.lease_ttl is not None else DEFAULT_TTL_S,
            settings=setup.settings,
            provider_factory=setup.adapter_for,
            tools=tools,
        )
    except ValueError:  # a bad host id or TTL: InputError (a ValueError)
        raise
    except Exception as exc:
        warn(f"cairn serve: cannot serve on {args.nats}: {type(exc).__name__}: {exc}")
        return None


def _on_signals(stop: threading.Event) -> dict[signal.Signals, Any]:
    """SIGTERM and SIGINT set `stop` (the main thread waits on it); the previous handlers, to restore."""

    def handler(signum: int, frame: types.FrameType | None) -> None:
        stop.set()

    return {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
