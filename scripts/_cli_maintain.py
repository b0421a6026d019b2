"""The `cairn` commands that check or change a store: verify, reindex, and the one repair (accept a loss)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from cairn import _console
from cairn._cli_base import EXIT_OK, EXIT_PROBLEMS, UsageError, cluster_url, store_root
from cairn._cli_output import print_json, progress_bar
from cairn.store.segments import segment_name


def cmd_verify(args: argparse.Namespace) -> int:
    """Check the store; exit 1 for problems. Warnings (a torn tail, an accepted loss) and information (an
    index that lags the log) leave the exit code 0. On a cluster (`--nats`): `verify_cluster`, shown alike
    (a cluster store has no index, torn tail or accepted loss: problems only)."""
    from cairn.store.verify import verify_store

    url = cluster_url(args)
    if url is not None:
        from cairn._cli_cluster import verify_on_cluster

        cluster_report = verify_on_cluster(args, url)
        return show_report(args, cluster_report, cluster_report.ok, [], [], cluster_report.problems)
    root = store_root(args)
    with progress_bar("verifying", not args.json) as progress:
        report = verify_store(root, progress=progress)
    return show_report(args, report, report.ok, report.info, report.warnings, report.problems)


def show_report(
    args: argparse.Namespace,
    report: msgspec.Struct,
    ok: bool,
    info: Sequence[object],
    warnings: Sequence[object],
    problems: Sequence[object],
) -> int:
    """A verify report as JSON or as lines (info, warnings, problems, then the counts); its exit code."""
    if args.json:
        print_json({**msgspec.to_builtins(report), "ok": ok})
    else:
        for note in info:  # findings quote the store (paths, session ids, link targets): escaped
            print(f"info: {_console.printable(note)}")
        for warning in warnings:
            print(f"warning: {_console.printable(warning)}")
        for problem in problems:
            print(f"PROBLEM: {_console.printable(problem)}")
        data = msgspec.to_builtins(report)
        counts = {k: v for k, v in data.items() if isinstance(v, int) and not isinstance(v, bool)}
        print(("ok" if ok else "problems found") + " " + json.dumps(counts))
    return EXIT_OK if ok else EXIT_PROBLEMS


def cmd_reindex(args: argparse.Namespace) -> int:
    """Rebuild the LMDB index from the log."""
    from cairn.store.reindex import reindex

    root = store_root(args)
    with progress_bar("reindexing", not args.json) as progress:
        result = reindex(root, progress=progress)
    if args.json:
        print_json(msgspec.to_builtins(result))
    else:
        print(f"reindexed {result.lines_indexed:,} lines of {result.segments} segment(s) from the log")
        for entry in result.corruptions:
            who = f"session {entry.sid} seq {entry.seq}" if entry.sid else "a line of no known session"
            print(f"corrupt: {segment_name(entry.segment)}@{entry.offset}, {who}: {entry.reason}")
        for note in result.notes:
            print(note)
    # corrupt lines recorded: each session is unreadable past its own (`cairn verify` says more)
    return EXIT_PROBLEMS if result.corruptions else EXIT_OK


def _unreadable_past_gaps(root: Path, sids: list[str]) -> list[dict[str, Any]]:
    """The sessions of `sids` a loss left unreadable from a seq on (lines before it read, those
    after it fail closed), with how many of their lines the log still holds past it."""
    from cairn.store import Journal

    found = []
    with Journal.open(root, readonly=True) as journal:
        for sid in sids:
            summary = journal.session(sid)
            if summary is not None and summary.broken_seq:
                past = summary.events - (summary.broken_seq - 1)
                found.append({"sid": sid, "from_seq": summary.broken_seq, "lines": max(0, past)})
    return found


def cmd_repair(args: argparse.Namespace) -> int:
    """The one repair cairn makes on request: accept, and log, the loss of acknowledged lines."""
    from cairn.store.repair import accept_loss

    root = store_root(args)
    if not args.accept_loss:
        raise UsageError(
            "repair changes nothing unless told what to accept: pass --accept-loss to record "
            "that the acknowledged lines `cairn verify` reports missing are lost"
        )
    with progress_bar("repairing", not args.json) as progress:
        record = accept_loss(root, reason=args.reason, progress=progress)
    cut_off = _unreadable_past_gaps(root, sorted({loss.sid for loss in record.sessions}))
    if args.json:
        print_json({**msgspec.to_builtins(record), "unreadable": cut_off})
        return EXIT_OK
    for span in record.ranges:
        shown = (
            f"pos {span.first_pos}"
            if span.first_pos == span.last_pos
            else f"positions {span.first_pos}-{span.last_pos}"
        )
        print(f"accepted the loss of {shown} ({_console.printable(span.where)})")
    lost = _console.printable(", ".join(str(s) for s in record.sessions))
    print(f"sessions: {lost or 'none known'}" + ("" if record.sessions_known else " (others unknown)"))
    for kept in record.quarantined:
        print(f"kept the {kept.length} bytes cut at {kept.segment}@{kept.offset} in {kept.file}")
    for gone in cut_off:
        print(
            f"session {_console.printable(gone['sid'])} is unreadable from seq {gone['from_seq']} on: "
            f"{gone['lines']:,} line(s) past the gap stay in the log but cannot be read (fail closed)"
        )
    print(
        "recorded in operator.jsonl; writers may open the store, and appends continue past the lost positions"
    )
    return EXIT_OK
