"""The `cairn` command line: audit, repair-free maintenance and benchmarks of a store.

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
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import msgspec

from events.codec import Record, decode_line
from events.errors import CairnError, InputError, UnknownKind
from events.kinds import (
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
from events.model import text_of
from events.state import replay
from scripts import _console

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """A command-line or environment problem: exit 2."""


# --- output helpers --------------------------------------------------------------------


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat(timespec="milliseconds")


def _print_json(obj: Any) -> None:
    sys.stdout.write(msgspec.json.encode(obj).decode() + "\n")


def _table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    if sys.stdout.isatty():
        from rich.table import Table

        table = Table(title=title)
        for column in columns:
            table.add_column(column, overflow="fold")
        for row in rows:
            table.add_row(*(str(cell) for cell in row))
        _console.console().print(table)
        return
    widths = [max([len(c)] + [len(str(r[i])) for r in rows]) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for row in rows:
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


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
            return _clip(text_of_parts(event))
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
            return f"epoch={event.epoch}"
        case CompactionFailed():
            return f"epoch={event.epoch} {event.reason} consecutive={event.consecutive_failures}"
        case CheckpointCommitted():
            return (f"epoch={event.epoch} {event.trigger}/{event.strategy} through={event.through_seq} "
                    f"tokens {event.source_tokens}->{event.replacement_tokens}")
    return ""


def text_of_parts(event: UserMessage) -> str:
    from events.model import Message

    return text_of(Message(role="user", content=event.content))


def _clip(text: str, width: int = 70) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def record_json(record: Record) -> dict[str, Any]:
    body = msgspec.to_builtins(record.event)
    return {"pos": record.pos, "sid": record.sid, "seq": record.seq, "ts": record.ts, **body}


# --- commands ----------------------------------------------------------------------------


def _store_root(args: argparse.Namespace) -> Path:
    """The store directory of `--store`, or a usage error when there is no store there."""
    root = Path(args.store)
    if not (root / "log").is_dir():
        raise UsageError(f"no cairn store at {root} (set --store or $CAIRN_STORE)")
    return root


def _open(args: argparse.Namespace) -> Any:
    from store import Journal

    return Journal.open(_store_root(args), readonly=True)


def cmd_sessions(args: argparse.Namespace) -> int:
    with _open(args) as journal:
        summaries = list(journal.sessions())
    if args.json:
        _print_json([msgspec.to_builtins(s) for s in summaries])
        return EXIT_OK
    rows = []
    for s in summaries:
        data = msgspec.to_builtins(s)
        rows.append([data.get("sid"), data.get("last_seq"), data.get("model", ""),
                     _iso(data["updated_ts"]) if data.get("updated_ts") else "",
                     data.get("checkpoint_seq") or data.get("latest_checkpoint_seq") or "",
                     data.get("workspace", "")])
    _table("sessions", ["session", "events", "model", "updated", "checkpoint", "workspace"], rows)
    return EXIT_OK


def cmd_log(args: argparse.Namespace) -> int:
    """A session's events; a kind this cairn does not know is listed by its envelope.

    An audit tool may read a log written by a newer cairn: from the first
    line of an unknown kind on, the listing continues from the raw segments
    (envelope only for such lines) with a warning. Any other bad line stops
    the listing after what was read, and exits 1.
    """
    from store import CorruptionError
    from store.reader import iter_records

    kinds = set(args.kind or ())
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
            if journal.last_seq(args.session) == 0:
                raise UsageError(f"no session {args.session!r} in {args.store}")
            next_seq = args.from_seq
            try:
                for record in journal.read(args.session, args.from_seq, args.to_seq):
                    emit(record.seq, record.ts, record.kind, describe(record.event), record_json(record))
                    next_seq = record.seq + 1
            except CorruptionError as exc:
                unknown = _unknown_kind_at(Path(args.store), exc)
                if unknown is None:
                    raise
                print(f"cairn: warning: seq {next_seq} of {args.session} is of a kind this cairn does not "
                      f"know ({unknown}); listing the rest from the raw log", file=sys.stderr)
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
    with _open(args) as journal:
        state = replay(journal.read(args.session, 1, args.until))
    if state.last_seq == 0:
        raise UsageError(f"no session {args.session!r} in {args.store}")
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
    from actors.session.request import assemble
    from actors.session.tokens import TokenCounter
    from actors.session.view import HistoryView

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
    from store.verify import verify_store

    root = _store_root(args)
    with _progress("verifying", not args.json) as progress:
        report = verify_store(root, progress=progress)
    if args.json:
        _print_json({**msgspec.to_builtins(report), "ok": report.ok})
    else:
        for note in report.info:
            print(f"info: {note}")
        for warning in report.warnings:
            print(f"warning: {warning}")
        for problem in report.problems:
            print(f"PROBLEM: {problem}")
        data = msgspec.to_builtins(report)
        counts = {k: v for k, v in data.items() if isinstance(v, int) and not isinstance(v, bool)}
        print(("ok" if report.ok else "problems found") + " " + json.dumps(counts))
    return EXIT_OK if report.ok else EXIT_PROBLEMS


def cmd_reindex(args: argparse.Namespace) -> int:
    from store.verify import reindex

    root = _store_root(args)
    with _progress("reindexing", not args.json) as progress:
        result = reindex(root, progress=progress)
    data = msgspec.to_builtins(result)
    _print_json(data) if args.json else print(f"reindexed: {json.dumps(data)}")
    return EXIT_OK


def cmd_repair(args: argparse.Namespace) -> int:
    """The one repair cairn makes on request: accept, and log, the loss of acknowledged lines."""
    from store.repair import accept_loss

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
        print(f"accepted the loss of {shown} ({span.where})")
    lost = ", ".join(str(s) for s in record.sessions)
    print(f"sessions: {lost or 'none known'}" + ("" if record.sessions_known else " (others unknown)"))
    for kept in record.quarantined:
        print(f"kept the {kept.length} bytes cut at {kept.segment}@{kept.offset} in {kept.file}")
    print("recorded in operator.jsonl; writers may open the store, and appends continue past the lost "
          "positions")
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    from scripts import demo

    argv = ["--store", args.store, "--sessions", str(args.sessions), "--turns", str(args.turns),
            "--provider", args.provider]
    return demo.main(argv + (["--json"] if args.json else []))


def cmd_bench(args: argparse.Namespace) -> int:
    from scripts import bench

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


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    try:
        return int(args.func(args))
    except UsageError as exc:
        print(f"cairn: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except InputError as exc:
        print(f"cairn: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except CairnError as exc:
        print(f"cairn: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_PROBLEMS
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
