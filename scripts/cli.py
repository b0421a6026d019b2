"""The `cairn` command line: audit, maintenance (one explicit repair) and benchmarks of a store.

Exit codes: 0 ok, 1 problems found, 2 usage or environment error.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lmdb
import msgspec

from cairn import _console
from cairn.events.codec import Record, decode_line
from cairn.events.errors import CairnError, DecodeError, InputError, UnknownKind
from cairn.events.kinds import (
    KINDS,
    AssistantMessage,
    CheckpointCommitted,
    CompactionFailed,
    ContextSlimmed,
    EventBase,
    Handoff,
    ProviderError,
    Request,
    SessionStarted,
    ToolResult,
    TurnCompleted,
    TurnFailed,
    TurnStarted,
    Usage,
    UserMessage,
)
from cairn.events.model import text_of
from cairn.events.state import replay

if TYPE_CHECKING:
    from cairn.store.index_records import SessionSummary

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """A command-line or environment problem: exit 2."""


# --- output helpers --------------------------------------------------------------------


def _iso(ms: int) -> str:
    """Unix milliseconds as ISO 8601 UTC; as the number itself when no date has it."""
    try:
        return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return str(ms)


def _print_json(obj: Any) -> None:
    """One JSON document on one line; a terminal cannot act on anything in it (`_console.json_line`)."""
    sys.stdout.write(_console.json_line(msgspec.json.encode(obj)) + "\n")


def _table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A table on stdout: rich on a terminal, aligned plain text otherwise.

    Every cell is shown through `_console.printable` (control characters
    escaped) and, on a terminal, as a rich `Text` (never parsed as markup):
    cells carry conversation text.
    """
    cells = [[_console.printable(cell) for cell in row] for row in rows]
    if sys.stdout.isatty():
        from rich.table import Table

        table = Table(title=_console.text(title))
        for column in columns:
            table.add_column(column, overflow="fold")
        for row in cells:
            table.add_row(*(_console.text(cell) for cell in row))
        _console.console().print(table)
        return
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


def _warn(message: str) -> None:
    print(f"cairn: {_console.printable(message)}", file=sys.stderr)


@contextlib.contextmanager
def _progress(label: str, enabled: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A progress callback (done, total) drawing a bar on a terminal, else None."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def describe(event: EventBase) -> str:
    """One short line about an event, for listings."""
    match event:
        case SessionStarted():
            return f"workspace={event.workspace} model={event.model} window={event.context_window}"
        case UserMessage():
            return _clip(text_of(event.content))
        case TurnStarted() | TurnCompleted():
            return f"turn={event.turn_id}"
        case TurnFailed():
            return f"turn={event.turn_id} phase={event.phase} {event.error_class}"
        case Request():
            return (f"{event.request_id} attempt={event.attempt} phase={event.phase} "
                    f"projected={event.projected_tokens} messages={event.message_count}")
        case AssistantMessage():
            calls = ",".join(c.name for c in event.tool_calls)
            return _clip(event.text) + (f" [calls: {calls}]" if calls else "")
        case Usage():
            return f"{event.request_id} prompt={event.prompt_tokens} completion={event.completion_tokens} " \
                   f"total={event.total_tokens}"
        case ToolResult():
            return f"{event.tool_name} {event.status}/{event.effect} chars={event.original_chars}"
        case ProviderError():
            return f"{event.request_id} {event.error_class} delivered={event.output_delivered}"
        case ContextSlimmed():
            return f"{event.mode} removed={len(event.removed_call_ids)} saved={event.tokens_saved}"
        case Handoff():
            return f"epoch={event.epoch} " + _clip(bytes(event.record).decode(errors="replace"), 60)
        case CompactionFailed():
            return f"epoch={event.epoch} {event.reason} consecutive={event.consecutive_failures}"
        case CheckpointCommitted():
            return (f"epoch={event.epoch} {event.trigger}/{event.strategy} through={event.through_seq} "
                    f"tokens {event.source_tokens}->{event.replacement_tokens}")
        case _:
            return ""


def _clip(text: str, width: int = 70) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def record_json(record: Record) -> dict[str, Any]:
    """A record as a JSON object: its envelope's place, then the event as the log spells it.

    Through the JSON codec rather than `msgspec.to_builtins`, so that every
    field the log holds (a hand-off's raw `record` included) comes out.
    """
    body = msgspec.json.decode(msgspec.json.encode(record.event))
    return {"pos": record.pos, "sid": record.sid, "seq": record.seq, "ts": record.ts, **body}


# --- commands ----------------------------------------------------------------------------


def _store_root(args: argparse.Namespace) -> Path:
    """The store directory of `--store`, or a usage error when there is no store there."""
    root = Path(args.store)
    if not (root / "log").is_dir():
        raise UsageError(f"no cairn store at {root} (set --store or $CAIRN_STORE)")
    return root


def _open(args: argparse.Namespace) -> Any:
    from cairn.store import Journal

    return Journal.open(_store_root(args), readonly=True)


def usage_of(summary: SessionSummary) -> dict[str, Any]:
    """A session's provider-reported usage: cumulative figures, None where unknown.

    `prompt_tokens` / `completion_tokens` sum the usage events that reported
    each; None (unknown, not 0) when the session got responses and none of
    them reported the figure. `usage_complete` says whether every response
    (`responses`) reported both; `responses_without_usage` how many did not,
    so a figure with some missing is a lower bound.
    `last_usage_total_tokens` is the last reported request's total.
    """
    responses = summary.counts.get("assistant-message", 0)
    reported = min(summary.prompt_reports, summary.completion_reports)
    return {
        "prompt_tokens": summary.prompt_tokens if summary.prompt_reports or not responses else None,
        "completion_tokens": (summary.completion_tokens
                              if summary.completion_reports or not responses else None),
        "usage_complete": reported >= responses,
        "responses": responses,
        "responses_without_usage": max(0, responses - reported),
        "last_usage_total_tokens": summary.last_usage_total_tokens,
    }


def _tokens_cell(value: int | None, complete: bool) -> str:
    if value is None:
        return "unknown"
    return f"{value:,}" if complete else f"≥{value:,}"


def cmd_sessions(args: argparse.Namespace) -> int:
    with _open(args) as journal:
        summaries = list(journal.sessions())
    if args.json:
        fields = ("prompt_reports", "completion_reports")
        _print_json([{**{k: v for k, v in msgspec.to_builtins(s).items() if k not in fields}, **usage_of(s)}
                     for s in summaries])
        return EXIT_OK
    rows = []
    for s in summaries:
        usage = usage_of(s)
        complete = usage["usage_complete"]
        rows.append([s.sid, s.last_seq, s.model, _iso(s.updated_ts) if s.updated_ts else "",
                     s.checkpoint_seq or "", _tokens_cell(usage["prompt_tokens"], complete),
                     _tokens_cell(usage["completion_tokens"], complete), s.workspace])
    _table("sessions", ["session", "events", "model", "updated", "checkpoint", "prompt tokens",
                        "completion tokens", "workspace"], rows)
    if any(not usage_of(s)["usage_complete"] for s in summaries):
        print("unknown: the provider reported no usage; ≥: some responses came without usage")
    return EXIT_OK


def cmd_log(args: argparse.Namespace) -> int:
    """A session's events; a kind this cairn does not know is listed by its envelope.

    An audit tool may read a log written by a newer cairn: from the first
    line of an unknown kind on, the listing continues from the raw segments
    (envelope only for such lines) with a warning. Any other bad line stops
    the listing after what was read, and exits 1.
    """
    from cairn.store import CorruptionError
    from cairn.store.reader import iter_records

    kinds = set(args.kind or ())
    _check_range(args.from_seq, args.to_seq)
    rows: list[list[Any]] = []

    def emit(seq: int, ts: int, kind: str, what: str, data: dict[str, Any]) -> None:
        if kinds and kind not in kinds:
            return
        if args.json:
            _print_json(data)
        else:
            rows.append([seq, _iso(ts), kind, what])

    try:
        with _open(args) as journal:
            summary = journal.session(args.session)
            if summary is None or summary.last_seq == 0:
                raise UsageError(f"no session {args.session!r} in {args.store}")
            _check_kinds(kinds, summary)
            next_seq = args.from_seq
            try:
                for record in journal.read(args.session, args.from_seq, args.to_seq):
                    emit(record.seq, record.ts, record.kind, describe(record.event), record_json(record))
                    next_seq = record.seq + 1
            except CorruptionError as exc:
                unknown = _unknown_kind_at(Path(args.store), exc)
                if unknown is None:
                    raise
                _warn(f"warning: seq {next_seq} of {args.session} is of a kind this cairn does not know "
                      f"({unknown}); listing the rest from the raw log")
                for line in iter_records(args.store, sid=args.session, from_seq=next_seq, to_seq=args.to_seq):
                    env = line.envelope
                    if env.seq != next_seq:  # a line the raw reader could not read at all
                        raise CorruptionError(f"no readable line for seq {next_seq}", segment=line.segment,
                                              offset=line.offset, sid=args.session, seq=next_seq) from exc
                    next_seq += 1
                    if line.record is not None:
                        record = line.record
                        emit(env.seq, env.ts, env.kind, describe(record.event), record_json(record))
                    else:
                        emit(env.seq, env.ts, env.kind, "(unknown kind: body not decoded)",
                             {"pos": env.pos, "sid": env.sid, "seq": env.seq, "ts": env.ts, "kind": env.kind,
                              "unknown_kind": True})
    except CorruptionError:
        if rows and not args.json:  # what was read before the bad line
            _table(f"log of {args.session}", ["seq", "time", "kind", "what"], rows)
        raise
    if not args.json:
        _table(f"log of {args.session}", ["seq", "time", "kind", "what"], rows)
    return EXIT_OK


def _check_range(from_seq: int, to_seq: int | None) -> None:
    if from_seq < 1:
        raise UsageError(f"--from {from_seq}: seqs start at 1")
    if to_seq is not None and to_seq < from_seq:
        raise UsageError(f"--to {to_seq} is before --from {from_seq}: nothing to list")


def _check_kinds(kinds: set[str], summary: SessionSummary) -> None:
    """A usage error for a `--kind` that no cairn event has and the session's log does not hold.

    A kind this cairn does not know is accepted when the session holds it
    (a log written by a newer cairn); a typo is not silently an empty listing.
    """
    wrong = sorted(kind for kind in kinds if kind not in KINDS and kind not in summary.counts)
    if wrong:
        raise UsageError(f"no event kind {', '.join(map(repr, wrong))}; the kinds are: {', '.join(KINDS)}")


def _unknown_kind_at(root: Path, error: Exception) -> str | None:
    """The kind of the line a CorruptionError points at, when that kind is merely unknown here."""
    segment, offset = getattr(error, "segment", ""), getattr(error, "offset", -1)
    path = root / "log" / str(segment)
    if not segment or offset < 0 or not path.is_file():
        return None
    with path.open("rb") as f:
        f.seek(offset)
        line = f.readline()
    try:
        decode_line(line)
    except UnknownKind as exc:
        return exc.kind
    except CairnError:
        return None
    return None


def cmd_checkpoints(args: argparse.Namespace) -> int:
    out = []
    with _open(args) as journal:
        if journal.last_seq(args.session) == 0:
            raise UsageError(f"no session {args.session!r} in {args.store}")
        for ref in journal.checkpoints(args.session):
            record = next(journal.read(args.session, ref.seq, ref.seq))
            cp = record.event
            assert isinstance(cp, CheckpointCommitted)
            out.append({"seq": record.seq, "ts": record.ts, "epoch": cp.epoch, "trigger": cp.trigger,
                        "strategy": cp.strategy, "through_seq": cp.through_seq,
                        "source_tokens": cp.source_tokens, "replacement_tokens": cp.replacement_tokens,
                        "messages": len(cp.replacement_messages), "files": list(cp.files_restored)})
    if args.json:
        _print_json(out)
    else:
        _table(f"checkpoints of {args.session}",
               ["seq", "epoch", "trigger", "strategy", "through", "tokens", "messages"],
               [[c["seq"], c["epoch"], c["trigger"], c["strategy"], c["through_seq"],
                 f"{c['source_tokens']} -> {c['replacement_tokens']}", c["messages"]] for c in out])
    return EXIT_OK


def cmd_replay(args: argparse.Namespace) -> int:
    if args.until is not None and args.until < 1:
        raise UsageError(f"--until {args.until}: seqs start at 1 (--until 1 replays the first event)")
    with _open(args) as journal:
        if journal.last_seq(args.session) == 0:
            raise UsageError(f"no session {args.session!r} in {args.store}")
        state = replay(journal.read(args.session, 1, args.until))
    summary = {
        "sid": state.sid, "last_seq": state.last_seq, "epoch": state.epoch, "revision": state.revision,
        "context_messages": len(state.context), "handoffs_in_epoch": len(state.epoch_handoffs),
        "open_turn": state.open_turn.turn_id if state.open_turn else None,
        "compaction_failures": state.carried.compaction_failures,
    }
    if args.json:
        _print_json({**summary, "context": msgspec.to_builtins(state.context)})
    else:
        _table(f"{args.session} replayed to seq {state.last_seq}", ["field", "value"],
               [[k, v] for k, v in summary.items()])
        _table("effective context", ["#", "role", "id", "text"],
               [[i, m.role, m.id or m.tool_call_id or "", _clip(text_of(m))]
                for i, m in enumerate(state.context)])
    return EXIT_OK


def cmd_context(args: argparse.Namespace) -> int:
    """What the session's next request would send, with local token counts per message and part."""
    from cairn.actors.session.request import assemble
    from cairn.actors.session.view import HistoryView
    from cairn.actors.tokens import TokenCounter

    with _open(args) as journal:
        if journal.last_seq(args.session) == 0:
            raise UsageError(f"no session {args.session!r} in {args.store}")
        state = journal.load(args.session)
    counter = TokenCounter()
    request = assemble(state, HistoryView(counter))
    snap = request.snapshot
    rows: list[dict[str, Any]] = [
        {"index": i, "role": m.role, "id": m.id or m.tool_call_id or "", "hidden": m.meta.hidden,
         "origin": m.meta.origin, "tokens": counter.message(m), "text": text_of(m)}
        for i, m in enumerate(request.messages)
    ]
    summary = {
        "session": args.session, "model": request.model, "messages": len(request.messages),
        "tools": len(request.tools), "history_revision": request.history_revision,
        "handoff_included": request.handoff_included, "fingerprint": request.fingerprint,
        "parts": {"system": request.parts.system, "tools": request.parts.tools,
                  "history": request.parts.history, "handoff": request.parts.handoff,
                  "total": request.parts.total},
        "projected_tokens": request.projection.tokens, "projection_source": request.projection.source,
        "input_budget": snap.input_budget, "handoff_threshold": snap.handoff_threshold,
        "compaction_threshold": snap.compaction_threshold, "phase": snap.phase,
    }
    if args.json:
        _print_json({**summary, "messages_sent": rows})
        return EXIT_OK
    _table(f"next request of {args.session}", ["field", "value"],
           [[k, json.dumps(v) if isinstance(v, dict) else v] for k, v in summary.items()])
    _table("messages", ["#", "role", "id", "tokens", "note", "text"],
           [[r["index"], r["role"], r["id"], r["tokens"],
             "hidden " + r["origin"] if r["hidden"] else r["origin"], _clip(r["text"], 60)] for r in rows])
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    """Check the store; exit 1 for problems. Warnings (a torn tail, an accepted loss) and information (an
    index that lags the log) leave the exit code 0."""
    from cairn.store.verify import verify_store

    root = _store_root(args)
    with _progress("verifying", not args.json) as progress:
        report = verify_store(root, progress=progress)
    if args.json:
        _print_json({**msgspec.to_builtins(report), "ok": report.ok})
    else:
        for note in report.info:  # findings quote the store (paths, session ids, link targets): escaped
            print(f"info: {_console.printable(note)}")
        for warning in report.warnings:
            print(f"warning: {_console.printable(warning)}")
        for problem in report.problems:
            print(f"PROBLEM: {_console.printable(problem)}")
        data = msgspec.to_builtins(report)
        counts = {k: v for k, v in data.items() if isinstance(v, int) and not isinstance(v, bool)}
        print(("ok" if report.ok else "problems found") + " " + json.dumps(counts))
    return EXIT_OK if report.ok else EXIT_PROBLEMS


def cmd_reindex(args: argparse.Namespace) -> int:
    from cairn.store.reindex import reindex

    root = _store_root(args)
    with _progress("reindexing", not args.json) as progress:
        result = reindex(root, progress=progress)
    data = msgspec.to_builtins(result)
    _print_json(data) if args.json else print(f"reindexed: {json.dumps(data)}")
    return EXIT_OK


def cmd_repair(args: argparse.Namespace) -> int:
    """The one repair cairn makes on request: accept, and log, the loss of acknowledged lines."""
    from cairn.store.repair import accept_loss

    root = _store_root(args)
    if not args.accept_loss:
        raise UsageError("repair changes nothing unless told what to accept: pass --accept-loss to record "
                         "that the acknowledged lines `cairn verify` reports missing are lost")
    with _progress("repairing", not args.json) as progress:
        record = accept_loss(root, reason=args.reason, progress=progress)
    if args.json:
        _print_json(msgspec.to_builtins(record))
        return EXIT_OK
    for span in record.ranges:
        shown = f"pos {span.first_pos}" if span.first_pos == span.last_pos else \
            f"positions {span.first_pos}-{span.last_pos}"
        print(f"accepted the loss of {shown} ({_console.printable(span.where)})")
    lost = _console.printable(", ".join(str(s) for s in record.sessions))
    print(f"sessions: {lost or 'none known'}" + ("" if record.sessions_known else " (others unknown)"))
    for kept in record.quarantined:
        print(f"kept the {kept.length} bytes cut at {kept.segment}@{kept.offset} in {kept.file}")
    print("recorded in operator.jsonl; writers may open the store, and appends continue past the lost "
          "positions")
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    from cairn import demo

    argv = ["--store", args.store, "--sessions", str(args.sessions), "--turns", str(args.turns),
            "--provider", args.provider]
    return demo.main(argv + (["--json"] if args.json else []))


def cmd_bench(args: argparse.Namespace) -> int:
    from cairn import bench

    argv = [*(["--quick"] if args.quick else []), *(["--json"] if args.json else [])]
    if args.only:
        argv += ["--only", args.only]
    return bench.main(argv)


# --- parser ----------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--store", default=os.environ.get("CAIRN_STORE", "./cairn-data"),
                        help="store directory (default: $CAIRN_STORE or ./cairn-data)")
    common.add_argument("--json", action="store_true", help="machine-readable output")

    parser = argparse.ArgumentParser(prog="cairn", description="cairn: event-sourced context engine")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("demo", parents=[common], help="the main job: concurrent sessions, end to end")
    p.add_argument("--sessions", type=int, default=8, metavar="N", help="concurrent sessions (8)")
    p.add_argument("--turns", type=int, default=12, metavar="M", help="turns per session this run (12)")
    p.add_argument("--provider", choices=("scripted", "openai"), default="scripted",
                   help="scripted (offline, default) or openai: the endpoint of the CAIRN_* variables")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("sessions", parents=[common], help="list sessions")
    p.set_defaults(func=cmd_sessions)

    p = sub.add_parser("log", parents=[common], help="a session's events (--json: JSON Lines)")
    p.add_argument("session")
    p.add_argument("--kind", action="append", help="only this kind (repeatable)")
    p.add_argument("--from", dest="from_seq", type=int, default=1, metavar="SEQ")
    p.add_argument("--to", dest="to_seq", type=int, default=None, metavar="SEQ")
    p.set_defaults(func=cmd_log)

    p = sub.add_parser("checkpoints", parents=[common], help="a session's checkpoints")
    p.add_argument("session")
    p.set_defaults(func=cmd_checkpoints)

    p = sub.add_parser("replay", parents=[common], help="a session's state replayed up to a seq")
    p.add_argument("session")
    p.add_argument("--until", type=int, default=None, metavar="SEQ")
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("context", parents=[common], help="what the next request would send, with tokens")
    p.add_argument("session")
    p.set_defaults(func=cmd_context)

    p = sub.add_parser("verify", parents=[common], help="check checksums, seqs, chains, blobs, index")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("reindex", parents=[common], help="rebuild the LMDB index from the log")
    p.set_defaults(func=cmd_reindex)

    p = sub.add_parser("repair", parents=[common], help="accept (and log) the loss of acknowledged lines")
    p.add_argument("--accept-loss", action="store_true", help="record that the missing lines are lost")
    p.add_argument("--reason", default="", help="why, for the operator log")
    p.set_defaults(func=cmd_repair)

    p = sub.add_parser("bench", parents=[common], help="benchmarks (ratios measured in one run)")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--only", default=None, help="comma-separated suites: store,context,compaction")
    p.set_defaults(func=cmd_bench)
    return parser


def exit_code(error: BaseException) -> int:
    """What an error that ends a command means for its exit status (see the module doc).

    1 for a problem the store holds (a corrupt line, a bad blob, a line that
    does not decode, acknowledged lines missing, an entry cairn did not make
    in place of its own); 2 for everything that kept the command from running:
    bad arguments, no or another writer's store (`StoreLocked`), a disk that
    failed (`StorageFailed`), an OS error on the path.
    """
    from cairn.store.errors import AcknowledgedDataMissing, BlobError, CorruptionError, UnexpectedEntry

    held = CorruptionError | BlobError | DecodeError | AcknowledgedDataMissing | UnexpectedEntry
    if isinstance(error, held):
        return EXIT_PROBLEMS
    return EXIT_USAGE


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    try:
        return int(args.func(args))
    except BrokenPipeError:
        return EXIT_OK
    except UsageError as exc:
        _warn(str(exc))
        return EXIT_USAGE
    except InputError as exc:
        code = exit_code(exc)
        _warn(str(exc) if code == EXIT_USAGE else f"{type(exc).__name__}: {exc}")
        return code
    except CairnError as exc:
        _warn(f"{type(exc).__name__}: {exc}")
        return exit_code(exc)
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else f" (the store at {args.store})"
        _warn(f"{exc.strerror or type(exc).__name__}{where}")
        return EXIT_USAGE
    except lmdb.Error as exc:  # the index's disk failed where the store let LMDB's error through
        _warn(f"the index failed: {type(exc).__name__}: {exc}")
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
