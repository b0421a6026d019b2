"""The `cairn export --format parquet|csv|otlp` command: arguments, the store, progress and the report."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

from cairn._cli_base import EXIT_OK, EXIT_PROBLEMS, UsageError, cluster_url, store_root
from cairn._cli_output import print_json, progress_bar, warn


def cmd_export_tables(args: argparse.Namespace) -> int:
    """Write the local store's log as tables in `--to`; exit 1 when a session was skipped as corrupt."""
    from cairn.audit.export import export_tables
    from cairn.audit.prices import load_prices
    from cairn.store import Journal

    if cluster_url(args) is not None:
        raise UsageError(
            "--format reads a local store (--store): "
            "copy a cluster's first with `cairn export --nats URL --to DIR`"
        )
    if args.since is not None and args.since < 0:
        raise UsageError(f"--since must be a position (0 or more), got {args.since}")
    prices = load_prices(args.prices) if getattr(args, "prices", None) else None  # BadPrices: exit 2
    root = store_root(args)
    target = Path(args.to)
    with (
        Journal.open(root, readonly=True) as journal,
        progress_bar("exporting: lines read", not args.json, counting="items") as progress,
    ):
        report = export_tables(
            journal,
            target,
            args.format,
            session=args.session,
            since=args.since,
            progress=progress,
            warn=None if args.json else warn,
            prices=prices,
        )
    if args.json:
        print_json(asdict(report))
    else:
        rows = sum(report.rows.values())
        print(
            f"exported {report.sessions} sessions, {report.rows.get('events', 0)} events ({rows} rows) "
            f"at {positions(report.since, report.until)} as {report.format} part {report.part} "
            f"to {target}" + (f"; skipped {len(report.skipped)} corrupt sessions" if report.skipped else "")
        )
    return EXIT_PROBLEMS if report.skipped else EXIT_OK


def positions(since: int, until: int) -> str:
    """The run's [since, until) in words: `positions 5..9`, or none when the log had nothing new."""
    return f"positions {since}..{until - 1}" if until > since else f"no new positions (from {since})"


def cmd_export_otlp(args: argparse.Namespace) -> int:
    """Write the local store's turns as OTLP traces to `--to` or `--otlp-endpoint`; exit 1 on a skip."""
    from cairn.audit.otlp import export_otlp
    from cairn.store import Journal

    if cluster_url(args) is not None:
        raise UsageError("--format otlp reads a local store (--store): copy a cluster's first")
    if (args.to is None) == (args.otlp_endpoint is None):
        raise UsageError("--format otlp needs one of --to FILE and --otlp-endpoint URL")
    with (
        Journal.open(store_root(args), readonly=True) as journal,
        progress_bar("exporting traces: lines read", not args.json, counting="items") as progress,
    ):
        report = export_otlp(
            journal,
            to=Path(args.to) if args.to is not None else None,
            endpoint=args.otlp_endpoint,
            session=args.session,
            since=args.since,
            provider=args.gen_ai_provider,
            content=args.otlp_content,
            timeout=args.otlp_timeout,
            progress=progress,
            warn=None if args.json else warn,
        )
    if args.json:
        print_json(report.as_dict())
    else:
        kinds = ", ".join(f"{n} {k}" for k, n in report.spans.items() if n)
        print(
            f"exported {report.spans['turn']} turns of {report.sessions} sessions as {report.traces} traces, "
            f"{sum(report.spans.values())} spans ({kinds or 'none'}) in {report.requests} OTLP requests "
            f"to {report.to}; {positions(report.since, report.until)}, next --since {report.until}"
            + (f"; {report.open_turns} turns still open" if report.open_turns else "")
            + (f"; skipped {len(report.skipped)} corrupt sessions" if report.skipped else "")
        )
    return EXIT_PROBLEMS if report.skipped else EXIT_OK


def cmd_timeline(args: argparse.Namespace) -> int:
    """Draw one session's timeline into `--out` (.png or .svg)."""
    from cairn._cli_base import open_store
    from cairn.audit import require
    from cairn.audit.timeline import save, timeline_data
    from cairn.events.codec import validate_session_id

    out = Path(args.out)
    if out.suffix.lower() not in (".png", ".svg"):
        raise UsageError(f"--out must name a .png or .svg file, got {out}")
    if out.is_symlink() or out.is_dir():
        raise UsageError(f"{out} is a link or a directory: name a new or regular file")
    if not out.parent.is_dir():
        raise UsageError(f"{out.parent} is not a directory")
    sid = validate_session_id(args.session)
    require("matplotlib")
    with open_store(args) as journal:
        if journal.session(sid) is None:
            raise UsageError(f"no session {sid!r} in {args.store}")
        data = timeline_data(sid, journal.read(sid))
    save(data, out)
    if args.json:
        print_json(
            {"session": sid, "out": str(out), "requests": len(data.projected), "markers": len(data.markers)}
        )
    else:
        print(f"drew {len(data.projected)} requests and {len(data.markers)} markers of {sid} into {out}")
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    """Write the static HTML report of the local store into `--out`; exit 1 when verify found problems
    or a session is corrupt (the report shows them)."""
    from cairn.audit.prices import load_prices
    from cairn.audit.report import now_ms, write_report

    if cluster_url(args) is not None:
        raise UsageError(
            "report reads a local store (--store): "
            "copy a cluster's first with `cairn export --nats URL --to DIR`"
        )
    prices = load_prices(args.prices) if getattr(args, "prices", None) else None  # BadPrices: exit 2
    root = store_root(args)
    out = Path(args.out)
    with progress_bar("reporting: events read", not args.json, counting="items") as progress:
        result = write_report(
            root,
            out,
            now_ms=now_ms(),
            progress=progress,
            warn=None if args.json else warn,
            handoffs=getattr(args, "handoffs", False),
            prices=prices,
        )
    if args.json:
        print_json(asdict(result))
    else:
        verdict = "verify ok" if result.verify_ok else f"verify found {result.verify_problems} problems"
        corrupt = f", {len(result.corrupt)} corrupt" if result.corrupt else ""
        print(
            f"reported {result.sessions} sessions ({result.events} events{corrupt}; {verdict}) "
            f"into {out / 'index.html'}"
        )
    return EXIT_OK if result.verify_ok and not result.corrupt else EXIT_PROBLEMS
