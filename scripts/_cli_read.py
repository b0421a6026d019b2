"""The read-only `cairn` commands: log, checkpoints, replay and context of a store.

They take no lock and change nothing; a listing describes each event in one line (`describe`).
`cairn sessions` is in `_cli_sessions`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, assert_never

import msgspec
from msgspec import UNSET

from cairn._cli_base import EXIT_OK, UsageError, open_store, where
from cairn._cli_output import clip, iso, print_json, print_table
from cairn.events.codec import Record
from cairn.events.kinds import (
    KINDS,
    AssistantMessage,
    CheckpointCommitted,
    CompactionFailed,
    ContextSlimmed,
    Event,
    Handoff,
    OwnerChanged,
    ProviderError,
    Request,
    SessionStarted,
    ToolDeferred,
    ToolResult,
    TurnCancelled,
    TurnCompleted,
    TurnDismissed,
    TurnFailed,
    TurnStarted,
    Usage,
    UserMessage,
)
from cairn.events.model import text_of
from cairn.events.state import replay
from cairn.store.errors import IndexUnusable

if TYPE_CHECKING:
    from cairn.actors.session.request import AssembledRequest
    from cairn.store.backend import JournalBackend

#: how `cmd_log` lists one line: its seq, time, kind, one-line description and JSON object
Emit = Callable[[int, int, str, str, dict[str, Any]], None]


def describe(event: Event) -> str:
    """One short line about an event, for listings."""
    match event:
        case SessionStarted():
            return f"workspace={event.workspace} model={event.model} window={event.context_window}"
        case UserMessage():
            return clip(text_of(event.content))
        case TurnStarted() | TurnCompleted():
            return f"turn={event.turn_id}"
        case TurnFailed():
            return f"turn={event.turn_id} phase={event.phase} {event.error_class}"
        case TurnDismissed():
            return f"turn={event.turn_id} dismissed " + clip(event.reason, 60)
        case ToolDeferred():
            return f"{event.call_id} {event.tool_name} waits for its result (at most {event.timeout_ms} ms)"
        case TurnCancelled():
            return f"turn={event.turn_id} " + clip(event.reason, 60)
        case Request():
            return (
                f"{event.request_id} attempt={event.attempt} phase={event.phase} "
                f"projected={event.projected_tokens} messages={event.message_count}"
            )
        case AssistantMessage():
            calls = ",".join(c.name for c in event.tool_calls)
            return clip(event.text) + (f" [calls: {calls}]" if calls else "")
        case Usage():
            reads = "" if event.cached_prompt_tokens is None else f" cache_read={event.cached_prompt_tokens}"
            writes = "" if event.cache_write_tokens is UNSET else f" cache_write={event.cache_write_tokens}"
            return (
                f"{event.request_id} prompt={event.prompt_tokens} completion={event.completion_tokens} "
                f"total={event.total_tokens}{reads}{writes}"
            )
        case ToolResult():
            via = (
                "" if event.server is UNSET else f" (server {event.server}, tool {event.server_tool or '?'})"
            )
            return f"{event.tool_name}{via} {event.status}/{event.effect} chars={event.original_chars}"
        case ProviderError():
            return f"{event.request_id} {event.error_class} delivered={event.output_delivered}"
        case ContextSlimmed():
            return f"{event.mode} removed={len(event.removed_call_ids)} saved={event.tokens_saved}"
        case Handoff():
            return f"epoch={event.epoch} " + clip(bytes(event.record).decode(errors="replace"), 60)
        case CompactionFailed():
            return f"epoch={event.epoch} {event.reason} consecutive={event.consecutive_failures}"
        case CheckpointCommitted():
            return (
                f"epoch={event.epoch} {event.trigger}/{event.strategy} through={event.through_seq} "
                f"tokens {event.source_tokens}->{event.replacement_tokens}"
            )
        case OwnerChanged():
            before = f" (was {event.previous_host})" if event.previous_host else ""
            return f"host={event.host_id} lease={event.lease_revision}{before}"
        case _:
            assert_never(event)  # a new kind must be described here: mypy says so


def record_json(record: Record) -> dict[str, Any]:
    """A record as a JSON object: its envelope's place, then the event as the log spells it.

    Through the JSON codec rather than `msgspec.to_builtins`, so that every
    field the log holds (a hand-off's raw `record` included) comes out.
    """
    body = msgspec.json.decode(msgspec.json.encode(record.event))
    return {"pos": record.pos, "sid": record.sid, "seq": record.seq, "ts": record.ts, **body}


def cmd_log(args: argparse.Namespace) -> int:
    """A session's events; a kind this cairn does not know is listed by its envelope.

    An audit tool may read a log written by a newer cairn: from the first
    line of an unknown kind on, the listing continues from the raw segments
    (envelope only for such lines) with a warning. Any other bad line stops
    the listing after what was read, and exits 1.
    """
    from cairn.store import CorruptionError

    kinds = set(args.kind or ())
    _check_range(args.from_seq, args.to_seq)
    rows: list[list[Any]] = []

    def emit(seq: int, ts: int, kind: str, what: str, data: dict[str, Any]) -> None:
        if kinds and kind not in kinds:
            return
        if args.json:
            print_json(data)
        else:
            rows.append([seq, iso(ts), kind, what])

    try:
        with open_store(args) as journal:
            if journal.last_seq(args.session) == 0:
                raise UsageError(f"no session {args.session!r} in {where(args)}")
            _check_kinds(kinds, journal, args.session)
            next_seq = args.from_seq
            try:
                for record in journal.read(args.session, args.from_seq, args.to_seq):
                    emit(record.seq, record.ts, record.kind, describe(record.event), record_json(record))
                    next_seq = record.seq + 1
            except CorruptionError as exc:
                from cairn._cli_rawlog import list_rest_raw, raw_rest

                found = raw_rest(journal, args, exc, next_seq)
                if found is None:
                    raise
                unknown, lines = found
                list_rest_raw(args, next_seq, unknown, emit, exc, lines)
    except CorruptionError:
        if rows and not args.json:  # what was read before the bad line
            print_table(f"log of {args.session}", ["seq", "time", "kind", "what"], rows)
        raise
    if not args.json:
        print_table(f"log of {args.session}", ["seq", "time", "kind", "what"], rows)
    return EXIT_OK


def _check_range(from_seq: int, to_seq: int | None) -> None:
    """A usage error for a `--from`/`--to` range that can hold no seq."""
    if from_seq < 1:
        raise UsageError(f"--from {from_seq}: seqs start at 1")
    if to_seq is not None and to_seq < from_seq:
        raise UsageError(f"--to {to_seq} is before --from {from_seq}: nothing to list")


def _check_kinds(kinds: set[str], journal: JournalBackend, sid: str) -> None:
    """A usage error for a `--kind` that no cairn event has and the session's log does not hold.

    A kind this cairn does not know is accepted when the session holds it
    (a log written by a newer cairn); a typo is not silently an empty listing.
    The session's summary is read only for such a kind (on a cluster it is a
    read of the whole session, and it stops at a kind this cairn does not know).
    """
    unknown = [kind for kind in kinds if kind not in KINDS]
    if not unknown:
        return
    from cairn.store import CorruptionError

    try:
        summary = journal.session(sid)
        held = set(summary.counts) if summary is not None else set()
    except CorruptionError:  # a cluster's summary stops at a newer kind: the envelopes tell the kinds
        from cairn.store.jetstream.journal import JetStreamJournal
        from cairn.store.jetstream.raw import raw_session_lines

        if not isinstance(journal, JetStreamJournal):
            raise
        held = {line.envelope.kind for line in raw_session_lines(journal, sid, 1)}
    wrong = sorted(kind for kind in unknown if kind not in held)
    if wrong:
        raise UsageError(f"no event kind {', '.join(map(repr, wrong))}; the kinds are: {', '.join(KINDS)}")


def cmd_checkpoints(args: argparse.Namespace) -> int:
    """A session's checkpoints: trigger, strategy, tokens before and after."""
    out = []
    with open_store(args) as journal:
        if journal.last_seq(args.session) == 0:
            raise UsageError(f"no session {args.session!r} in {where(args)}")
        for ref in journal.checkpoints(args.session):
            record = next(iter(journal.read(args.session, ref.seq, ref.seq)), None)
            cp = record.event if record is not None else None
            if record is None or not isinstance(cp, CheckpointCommitted):
                raise IndexUnusable(
                    f"the index names a checkpoint of {args.session} at seq {ref.seq} that the log does "
                    "not hold there: the index is damaged; `cairn reindex` rebuilds it from the log"
                )
            out.append(
                {
                    "seq": record.seq,
                    "ts": record.ts,
                    "epoch": cp.epoch,
                    "trigger": cp.trigger,
                    "strategy": cp.strategy,
                    "through_seq": cp.through_seq,
                    "source_tokens": cp.source_tokens,
                    "replacement_tokens": cp.replacement_tokens,
                    "messages": len(cp.replacement_messages),
                    "files": list(cp.files_restored),
                }
            )
    if args.json:
        print_json(out)
    else:
        print_table(
            f"checkpoints of {args.session}",
            ["seq", "epoch", "trigger", "strategy", "through", "tokens", "messages"],
            [
                [
                    c["seq"],
                    c["epoch"],
                    c["trigger"],
                    c["strategy"],
                    c["through_seq"],
                    f"{c['source_tokens']} -> {c['replacement_tokens']}",
                    c["messages"],
                ]
                for c in out
            ],
        )
    return EXIT_OK


def cmd_replay(args: argparse.Namespace) -> int:
    """The state a session's log folds to (up to `--until`), and its effective context."""
    if args.until is not None and args.until < 1:
        raise UsageError(f"--until {args.until}: seqs start at 1 (--until 1 replays the first event)")
    with open_store(args) as journal:
        if journal.last_seq(args.session) == 0:
            raise UsageError(f"no session {args.session!r} in {where(args)}")
        state = replay(journal.read(args.session, 1, args.until))
    summary = {
        "sid": state.sid,
        "last_seq": state.last_seq,
        "epoch": state.epoch,
        "revision": state.revision,
        "context_messages": len(state.context),
        "handoffs_in_epoch": len(state.epoch_handoffs),
        "open_turn": state.open_turn.turn_id if state.open_turn else None,
        "compaction_failures": state.carried.compaction_failures,
    }
    if args.json:
        print_json({**summary, "context": msgspec.to_builtins(state.context)})
    else:
        print_table(
            f"{args.session} replayed to seq {state.last_seq}",
            ["field", "value"],
            [[k, v] for k, v in summary.items()],
        )
        print_table(
            "effective context",
            ["#", "role", "id", "text"],
            [
                [i, m.role, m.id or m.tool_call_id or "", clip(text_of(m))]
                for i, m in enumerate(state.context)
            ],
        )
    return EXIT_OK


def _request_summary(session: str, request: AssembledRequest) -> dict[str, Any]:
    """The next request's figures: sizes per part, the projection, and the pipeline's thresholds."""
    from cairn.actors.session.request import budget_figures

    return {
        "session": session,
        "model": request.model,
        "messages": len(request.messages),
        "tools": len(request.tools),
        "history_revision": request.history_revision,
        "handoff_included": request.handoff_included,
        "fingerprint": request.fingerprint,
        "parts": {
            "system": request.parts.system,
            "tools": request.parts.tools,
            "history": request.parts.history,
            "handoff": request.parts.handoff,
            "total": request.parts.total,
        },
        **budget_figures(request),
        "cache_breakpoints": list(request.cache_breakpoints),
    }


def cmd_context(args: argparse.Namespace) -> int:
    """What the session's next request would send, with local token counts per message and part."""
    from cairn.actors.session.request import assemble
    from cairn.actors.session.view import HistoryView
    from cairn.actors.tokens import TokenCounter

    with open_store(args) as journal:
        if journal.last_seq(args.session) == 0:
            raise UsageError(f"no session {args.session!r} in {where(args)}")
        state = journal.load(args.session)
    counter = TokenCounter()
    request = assemble(state, HistoryView(counter))
    rows: list[dict[str, Any]] = [
        {
            "index": i,
            "role": m.role,
            "id": m.id or m.tool_call_id or "",
            "hidden": m.meta.hidden,
            "origin": m.meta.origin,
            "tokens": counter.message(m),
            "text": text_of(m),
        }
        for i, m in enumerate(request.messages)
    ]
    summary = _request_summary(args.session, request)
    if args.json:
        print_json({**summary, "messages_sent": rows})
        return EXIT_OK
    print_table(
        f"next request of {args.session}",
        ["field", "value"],
        [[k, json.dumps(v) if isinstance(v, dict) else v] for k, v in summary.items()],
    )
    print_table(
        "messages",
        ["#", "role", "id", "tokens", "note", "text"],
        [
            [
                r["index"],
                r["role"],
                r["id"],
                r["tokens"],
                "hidden " + r["origin"] if r["hidden"] else r["origin"],
                clip(r["text"], 60),
            ]
            for r in rows
        ],
    )
    return EXIT_OK


def cmd_schema(args: argparse.Namespace) -> int:
    """`cairn schema`: the JSON Schema every log line satisfies (`cairn.events.line_schema`)."""
    from cairn.events.line_schema import line_schema

    print(json.dumps(line_schema(), indent=2))
    return EXIT_OK
