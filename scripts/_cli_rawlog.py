"""`cairn log` past a line of a kind this cairn does not know: the rest of the session from its raw
lines (local segments or the cluster's messages), each listed by its envelope when its body is unknown."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from cairn._cli_base import cluster_url
from cairn._cli_output import warn
from cairn._cli_read import Emit, describe, record_json
from cairn.events.codec import decode_line
from cairn.events.errors import CairnError, UnknownKind

if TYPE_CHECKING:
    from cairn.store import CorruptionError
    from cairn.store.backend import JournalBackend
    from cairn.store.reader import AuditRecord


def raw_rest(
    journal: JournalBackend, args: argparse.Namespace, error: CorruptionError, next_seq: int
) -> tuple[str, Iterator[AuditRecord]] | None:
    """When the line `error` names is of a kind this cairn does not know: that kind, and the session's
    raw lines from `next_seq` on (local segments or the cluster's messages); else None."""
    if cluster_url(args) is None:
        from cairn.store.reader import iter_records

        unknown = _unknown_kind_at(Path(args.store), error)
        lines = iter_records(args.store, sid=args.session, from_seq=next_seq, to_seq=args.to_seq)
        return None if unknown is None else (unknown, lines)
    from cairn.store.jetstream.journal import JetStreamJournal
    from cairn.store.jetstream.raw import raw_session_lines, unknown_kind_at

    assert isinstance(journal, JetStreamJournal)
    unknown = unknown_kind_at(journal, args.session, error)
    if unknown is None:
        return None
    return unknown, raw_session_lines(journal, args.session, next_seq, args.to_seq)


def list_rest_raw(
    args: argparse.Namespace,
    next_seq: int,
    unknown: str,
    emit: Emit,
    cause: CorruptionError,
    lines: Iterator[AuditRecord],
) -> None:
    """The listing of `cmd_log` from `next_seq` on, from the raw lines: the line there is of a kind
    this cairn does not know (`unknown`), which the listing shows by its envelope only."""
    from cairn.store import CorruptionError

    warn(
        f"warning: seq {next_seq} of {args.session} is of a kind this cairn does not know "
        f"({unknown}); listing the rest from the raw lines"
    )
    for line in lines:
        env = line.envelope
        if env.seq != next_seq:  # a line the raw reader could not read at all
            raise CorruptionError(
                f"no readable line for seq {next_seq}",
                segment=line.segment,
                offset=line.offset,
                sid=args.session,
                seq=next_seq,
            ) from cause
        next_seq += 1
        if line.record is not None:
            record = line.record
            emit(env.seq, env.ts, env.kind, describe(record.event), record_json(record))
        else:
            emit(
                env.seq,
                env.ts,
                env.kind,
                "(unknown kind: body not decoded)",
                {
                    "pos": env.pos,
                    "sid": env.sid,
                    "seq": env.seq,
                    "ts": env.ts,
                    "kind": env.kind,
                    "unknown_kind": True,
                },
            )


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
