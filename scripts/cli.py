"""The `cairn` command line: audit, maintenance (one explicit repair) and benchmarks of a store.

Exit codes: 0 ok, 1 problems found, 2 usage or environment error.

The parser, `main` and the exit codes of errors are here; the commands are
in `_cli_read` (log, checkpoints, replay, context), `_cli_sessions`
(sessions), `_cli_interrupted` (interrupted) and
`_cli_maintain` (verify, reindex, repair), `_cli_serve` (serve: a host of
a cluster), with what they share in
`_cli_base` (the usage error, the store of `--store`) and `_cli_output`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import lmdb

from cairn._cli_base import (
    EXIT_OK,
    EXIT_PROBLEMS,
    EXIT_USAGE,
    StoreDefault,
    UsageError,
    default_store,
    exit_code,
)
from cairn._cli_cluster import cluster_options, cmd_export
from cairn._cli_interrupted import cmd_interrupted
from cairn._cli_maintain import cmd_reindex, cmd_repair, cmd_verify
from cairn._cli_output import warn
from cairn._cli_read import cmd_checkpoints, cmd_context, cmd_log, cmd_replay, cmd_schema
from cairn._cli_serve import add_serve
from cairn._cli_sessions import cmd_sessions
from cairn.events.errors import CairnError, InputError


def cmd_demo(args: argparse.Namespace) -> int:
    """`cairn demo`: `cairn.demo.main` with these arguments."""
    from cairn import demo

    argv = ["--store", args.store, "--provider", args.provider]
    argv += ["--sessions", str(args.sessions)] if args.sessions is not None else []
    argv += ["--turns", str(args.turns)] if args.turns is not None else []
    argv += ["--cluster"] if args.cluster else []
    argv += ["--http"] if args.http else []
    argv += ["--mcp"] if args.mcp else []
    argv += ["--local-model"] if args.local_model else []
    return demo.main(argv + (["--json"] if args.json else []))


def cmd_bench(args: argparse.Namespace) -> int:
    """`cairn bench`: `cairn.bench.main` with these arguments."""
    from cairn import bench

    flags = {"--quick": args.quick, "--json": args.json, "--explore": args.explore, "--long": args.long}
    argv = [flag for flag, given in flags.items() if given]
    if args.only:
        argv += ["--only", args.only]
    if args.provider:
        argv += ["--provider", args.provider]
    return bench.main(argv)


def cmd_local_model(args: argparse.Namespace) -> int:
    """`cairn local-model`: llama.cpp's server with a packaged model on 127.0.0.1, until a signal."""
    from cairn.local_model import LocalModelServer, serve_forever

    if args.context_window < 256 or args.threads < 1 or args.parallel < 1 or not 0 <= args.port <= 65535:
        raise UsageError(
            "--context-window is at least 256, --parallel and --threads at least 1, --port 0-65535"
        )
    server = LocalModelServer(
        model=args.model,
        context_window=args.context_window,
        parallel=args.parallel,
        port=args.port or None,
        threads=args.threads,
    )
    return serve_forever(server)


def cmd_export_any(args: argparse.Namespace) -> int:
    """`cairn export`: tables of the local store with --format (`cairn.audit`), else a cluster's copy."""
    if args.format == "otlp":
        from cairn.audit.command import cmd_export_otlp

        return cmd_export_otlp(args)
    if args.otlp_endpoint is not None:
        raise UsageError("--otlp-endpoint goes with --format otlp")
    if args.to is None:
        raise UsageError("export needs --to")
    if args.format is not None:
        from cairn.audit.command import cmd_export_tables

        return cmd_export_tables(args)
    if args.session is not None or args.since is not None:
        raise UsageError("--session and --since go with --format parquet|csv|otlp")
    return cmd_export(args)


def cmd_timeline_lazy(args: argparse.Namespace) -> int:
    """`cairn timeline`: `cairn.audit.command.cmd_timeline` (imported only when used)."""
    from cairn.audit.command import cmd_timeline

    return cmd_timeline(args)


def cmd_report_lazy(args: argparse.Namespace) -> int:
    """`cairn report`: `cairn.audit.command.cmd_report` (imported only when used)."""
    from cairn.audit.command import cmd_report

    return cmd_report(args)


# --- parser ----------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The `cairn` parser: one subcommand each, with `--store` and `--json` on all.

    The `_add_*` steps declare them group by group, in the order `cairn --help` lists them.
    """
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--store",
        default=default_store(),
        help="store directory (default: $CAIRN_STORE or ./cairn-data)",
    )
    common.add_argument("--json", action="store_true", help="machine-readable output")

    reads = [common, cluster_options()]  # the commands that read a local store or a cluster's

    parser = argparse.ArgumentParser(prog="cairn", description="cairn: event-sourced context engine")
    parser.add_argument(
        "--store",
        dest="store_before",
        default=None,
        metavar="STORE",
        help="store directory, before the command too (`cairn --store DIR sessions`)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    _add_demo(sub, common)
    _add_readers(sub, reads)
    _add_exports(sub, reads)
    _add_report(sub, reads)
    p = sub.add_parser("reindex", parents=[common], help="rebuild the LMDB index from the log")
    p.set_defaults(func=cmd_reindex)

    p = sub.add_parser("repair", parents=[common], help="accept (and log) the loss of acknowledged lines")
    p.add_argument("--accept-loss", action="store_true", help="record that the missing lines are lost")
    p.add_argument("--reason", default="", help="why, for the operator log")
    p.set_defaults(func=cmd_repair)

    p = sub.add_parser(
        "schema", help="the JSON Schema of a log line (draft 2020-12), for readers that do not use cairn"
    )
    p.set_defaults(func=cmd_schema)

    _add_bench(sub, common)
    _add_local_model(sub)
    add_serve(sub, common)
    return parser


def _add_demo(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """`cairn demo`: the main job."""
    p = sub.add_parser("demo", parents=[common], help="the main job: concurrent sessions, end to end")
    p.add_argument(
        "--sessions", type=int, default=None, metavar="N", help="concurrent sessions (8; 12 --cluster)"
    )
    p.add_argument("--turns", type=int, default=None, metavar="M", help="turns per session (12; 6 --cluster)")
    p.add_argument(
        "--cluster",
        action="store_true",
        help="on a 3-node NATS cluster with 3 hosts, through a host SIGKILL and a node stop",
    )
    p.add_argument(
        "--http",
        action="store_true",
        help="through the HTTP API from client processes, across a server SIGKILL and restart",
    )
    p.add_argument(
        "--mcp",
        action="store_true",
        help="the sessions' tools from the MCP reference filesystem server (Node's npx; the mcp extra)",
    )
    p.add_argument(
        "--provider",
        choices=("scripted", "openai", "anthropic"),
        default="scripted",
        help="scripted (offline, default), openai or anthropic: the endpoint of the CAIRN_* variables",
    )
    p.add_argument(
        "--local-model",
        action="store_true",
        help="on llama.cpp's server with SmolLM2-135M, started here (the llm extra): 2 sessions x 8 "
        "turns, a 4,096-token window, 512 output tokens",
    )
    p.set_defaults(func=cmd_demo)


def _add_readers(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], reads: list[argparse.ArgumentParser]
) -> None:
    """The commands that read a store's sessions and log, and `verify`."""
    p = sub.add_parser("sessions", parents=reads, help="list sessions")
    p.set_defaults(func=cmd_sessions)

    p = sub.add_parser(
        "interrupted", parents=reads, help="turns a crash interrupted, with the user message to send again"
    )
    p.set_defaults(func=cmd_interrupted)

    p = sub.add_parser("log", parents=reads, help="a session's events (--json: JSON Lines)")
    p.add_argument("session")
    p.add_argument("--kind", action="append", help="only this kind (repeatable)")
    p.add_argument("--from", dest="from_seq", type=int, default=1, metavar="SEQ")
    p.add_argument("--to", dest="to_seq", type=int, default=None, metavar="SEQ")
    p.set_defaults(func=cmd_log)

    p = sub.add_parser("checkpoints", parents=reads, help="a session's checkpoints")
    p.add_argument("session")
    p.set_defaults(func=cmd_checkpoints)

    p = sub.add_parser("replay", parents=reads, help="a session's state replayed up to a seq")
    p.add_argument("session")
    p.add_argument("--until", type=int, default=None, metavar="SEQ")
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("context", parents=reads, help="what the next request would send, with tokens")
    p.add_argument("session")
    p.set_defaults(func=cmd_context)

    p = sub.add_parser("verify", parents=reads, help="check checksums, seqs, chains, blobs, index")
    p.set_defaults(func=cmd_verify)


def _prices_option(p: argparse.ArgumentParser, what: str) -> None:
    """`--prices FILE`: the operator's price table (`cairn.audit.prices`)."""
    p.add_argument(
        "--prices",
        default=None,
        metavar="FILE",
        help=f"a price table (JSON, per million tokens by model): {what}",
    )


def _add_report(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], reads: list[argparse.ArgumentParser]
) -> None:
    """`cairn report`: the static HTML report."""
    p = sub.add_parser("report", parents=reads, help="a static HTML report of the whole store")
    p.add_argument("--out", required=True, metavar="DIR", help="a new (or empty) directory, or a report's")
    p.add_argument(
        "--handoffs", action="store_true", help="show the hidden hand-off notes in the sessions' transcripts"
    )
    _prices_option(p, "the cost of each session and of all")
    p.set_defaults(func=cmd_report_lazy)


def _add_exports(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], reads: list[argparse.ArgumentParser]
) -> None:
    """The audit outputs: `export`, `timeline` and `report`."""
    p = sub.add_parser(
        "export",
        parents=reads,
        help="a cluster's store (--nats) as a local store, or a store's log as tables (--format)",
    )
    p.add_argument(
        "--to",
        default=None,
        metavar="DIR",
        help="a new (or empty) directory, or an export's; with --format otlp a new file",
    )
    p.add_argument(
        "--format",
        choices=("parquet", "csv", "otlp"),
        default=None,
        help="the local store's log as typed tables, or as OpenTelemetry traces (needs the audit extra)",
    )
    _prices_option(p, "with --format parquet|csv: the usage rows' cost")
    p.add_argument(
        "--otlp-endpoint",
        default=None,
        metavar="URL",
        help="with --format otlp: send the traces to this OTLP/HTTP endpoint (http://host:4318), not --to",
    )
    p.add_argument(
        "--otlp-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="with --otlp-endpoint: the most one request may take, retries included (10)",
    )
    p.add_argument(
        "--gen-ai-provider",
        default="unknown",
        metavar="NAME",
        help="with --format otlp: gen_ai.provider.name of the model requests (openai, anthropic, ...)",
    )
    p.add_argument(
        "--otlp-content",
        action="store_true",
        help="with --format otlp: put tool arguments and results into the spans (cut to 4,096 "
        "characters); without it only their sizes go out",
    )
    p.add_argument("--session", default=None, metavar="S", help="with --format: only this session")
    p.add_argument(
        "--since", type=int, default=None, metavar="POS", help="with --format: lines from this position"
    )
    p.set_defaults(func=cmd_export_any)

    p = sub.add_parser("timeline", parents=reads, help="a session's token curve and events as a picture")
    p.add_argument("session")
    p.add_argument("--out", required=True, metavar="FILE", help="a .png or .svg file (needs the audit extra)")
    p.set_defaults(func=cmd_timeline_lazy)


def _add_bench(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """`cairn bench`: the benchmarks."""
    p = sub.add_parser("bench", parents=[common], help="benchmarks (ratios measured in one run)")
    p.add_argument("--quick", action="store_true", help="a small run (under 2 minutes by default)")
    p.add_argument("--explore", action="store_true", help="also show the figures judged against nothing")
    p.add_argument(
        "--long",
        action="store_true",
        help="also the long suites (hosts, audit, cluster, model) and the full quality corpus",
    )
    p.add_argument(
        "--only",
        default=None,
        help="comma-separated suites (default: store, context, respawn, compaction, quality, turns, "
        "asyncloop, http) (long, only when named or with --long: hosts, audit, cluster, model)",
    )
    p.add_argument(
        "--provider",
        choices=("scripted", "openai"),
        default=None,
        help="the quality suite's summarizer: scripted (offline, default) or openai (the CAIRN_* settings)",
    )
    p.set_defaults(func=cmd_bench)


def _add_local_model(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`cairn local-model`: llama.cpp's server with a packaged model (the llm extra)."""
    from cairn.local_model import (
        DEFAULT_CONTEXT_WINDOW,
        DEFAULT_MODEL,
        DEFAULT_PARALLEL,
        MODELS,
        default_threads,
    )

    p = sub.add_parser(
        "local-model",
        help="run llama.cpp's server with a packaged model on 127.0.0.1 and print the CAIRN_* "
        "settings that point cairn at it (the llm extra)",
    )
    p.add_argument(
        "--model", choices=MODELS, default=DEFAULT_MODEL, help=f"the packaged model ({DEFAULT_MODEL})"
    )
    p.add_argument("--port", type=int, default=0, help="the port (a free one when 0, the default)")
    p.add_argument(
        "--context-window",
        type=int,
        default=DEFAULT_CONTEXT_WINDOW,
        help=f"each slot's context window in tokens ({DEFAULT_CONTEXT_WINDOW})",
    )
    p.add_argument(
        "--parallel", type=int, default=DEFAULT_PARALLEL, help=f"requests served at once ({DEFAULT_PARALLEL})"
    )
    p.add_argument("--threads", type=int, default=default_threads(), help="CPU threads (default: every core)")
    p.set_defaults(func=cmd_local_model)


def merge_store(args: argparse.Namespace) -> None:
    """`--store` given before the command (`cairn --store DIR sessions`) is the command's `--store`.

    Given on both sides it must name the same directory (a usage error otherwise).
    """
    before = getattr(args, "store_before", None)
    if before is None:
        return
    after = getattr(args, "store", None)
    if after is not None and not isinstance(after, StoreDefault) and after != before:
        raise UsageError(f"--store given twice, differently: {before} before the command, {after} after it")
    args.store = before


#: LMDB's errors for an index whose pages are not what it wrote (exit 1: a problem the store holds)
_INDEX_DAMAGE = (lmdb.CorruptedError, lmdb.PageNotFoundError, lmdb.BadChecksumError)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one `cairn` command; its exit status (an error ends it with one line on stderr)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    try:
        merge_store(args)
        return int(args.func(args))
    except BrokenPipeError:
        return EXIT_OK
    except UsageError as exc:
        warn(str(exc))
        return EXIT_USAGE
    except InputError as exc:
        code = exit_code(exc)
        warn(str(exc) if code == EXIT_USAGE else f"{type(exc).__name__}: {exc}")
        return code
    except CairnError as exc:
        warn(f"{type(exc).__name__}: {exc}")
        return exit_code(exc)
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else f" (the store at {args.store})"
        warn(f"{exc.strerror or type(exc).__name__}{where}")
        return EXIT_USAGE
    except _INDEX_DAMAGE as exc:  # pages that do not hold what LMDB wrote: the index, not the log
        warn(f"the index is damaged ({type(exc).__name__}: {exc}); `cairn reindex` rebuilds it from the log")
        return EXIT_PROBLEMS
    except lmdb.Error as exc:  # the index's disk failed where the store let LMDB's error through
        warn(f"the index failed: {type(exc).__name__}: {exc}")
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
