"""Appending one call to a session's subject: framing (pure) and the guarded, idempotent publish.

A call's events become lines of the local log format, framed on the
session's head (its last seq, the chain digest of its last line, and the
stream sequence of the message holding it), and go out as ONE atomic batch
guarded by `Nats-Expected-Last-Subject-Sequence: <head's stream seq>`. So
two writers can never interleave on a session: the second batch framed on
the same head is refused whole (`SessionFenced`, a `SeqConflict`).

`pos` on the cluster: the stream sequence a line gets is only known once it
is stored, and the stream's order across sessions is the stream's own (its
sequence, in each message's metadata); so a line's `pos` is its position in
its session, `seq - 1`. The cluster's `verify` checks exactly that, and
`export` gives every line its global position in stream order when it
writes a local store (whose `verify` then checks positions as usual).

Message ids are `<token>.<seq>.<line digest>`: a resend of the same call
(same head, same events, same ts) has the same ids, so the server's
duplicate window recognises it; another writer's line at the same seq has
another digest, so it is never mistaken for ours.

`publish_call` settles every doubtful reply (a lost ack, a duplicate, a
"wrong last sequence", a leader change) by reading what follows the head on
the subject before calling anything a conflict: our own lines there mean
stored; another writer's mean fenced; nothing means not stored, and the
call is sent again (same ids) until its deadline.

Attempts are short while a call is young (`attempt_timeout`): a publish
sent to a stream leader that has just died is never answered, and neither
is the read that would settle it (only the leader completes it), so each
waits out its whole timeout. With one request timeout (12 s) per attempt,
an append in flight at a leader's SIGKILL stalled 12 s, though a new leader
takes writes after 5-7 s (PITFALLS "NATS JetStream"). With 2 s attempts it
is sent again, with the same ids, about every 2 s until the new leader
answers; past one request timeout the attempts grow to it, so a cluster
that is slow rather than leaderless is not flooded with resends.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import msgspec
from nats.aio.client import Client
from nats.errors import Error as NatsError

from cairn.events.codec import (
    GENESIS,
    SCHEMA_VERSION,
    Record,
    chain_digest,
    decode_envelope,
    frame_line,
    json_string,
)
from cairn.events.errors import DecodeError, LineTooLarge
from cairn.events.kinds import EventBase
from cairn.store.errors import AppendTimeout, CorruptionError
from cairn.store.jetstream.batch import publish_batch
from cairn.store.jetstream.layout import ClusterError, SessionFenced
from cairn.store.jetstream.reads import DirectReader, Stored

log = logging.getLogger("cairn.store.jetstream")

#: one attempt's wait for its reply (and for the read that settles it) while a call is young
SHORT_ATTEMPT_S = 2.0


def attempt_timeout(elapsed_s: float, left_s: float, request_timeout_s: float) -> float:
    """How long one publish attempt, or one settling read, waits: pure (see the module doc).

    `SHORT_ATTEMPT_S` while the call has been under way for less than
    `request_timeout_s`, then `request_timeout_s`; never above
    `request_timeout_s`, never past the call's deadline (`left_s`), never 0.
    """
    wait = SHORT_ATTEMPT_S if elapsed_s < request_timeout_s else request_timeout_s
    return max(0.001, min(wait, request_timeout_s, left_s))


class Head(msgspec.Struct, frozen=True, gc=False):
    """A session's last line: its seq, chain digest, and the stream sequence of its message (0s: none).

    A struct, not a dataclass: one is made per append, on the loop.
    """

    last_seq: int = 0
    digest: str = GENESIS
    stream_seq: int = 0
    ts: int = 0


def head_of(stored: Stored | None) -> Head:
    """The head a session's last stored message gives (the empty head for none)."""
    if stored is None:
        return Head()
    try:
        env = decode_envelope(stored.data)
        digest = chain_digest(stored.data)
    except DecodeError as exc:
        raise CorruptionError(
            f"the session's last line is unreadable: {exc}", segment=stored.subject, offset=stored.stream_seq
        ) from exc
    return Head(env.seq, digest, stored.stream_seq, env.ts)


class Framed(msgspec.Struct, frozen=True):
    """A call's lines, records and message ids, framed on a head."""

    lines: list[bytes]
    records: list[Record]
    msg_ids: list[str]
    digest: str


def frame_call(
    sid: str,
    token: str,
    head: Head,
    events: Sequence[tuple[EventBase, bytes, str]],
    ts: int,
    max_line: int,
) -> Framed:
    """Frame checked events (event, body, kind tag) after `head`: pure. LineTooLarge over `max_line`."""
    sid_json = json_string(sid)
    seq, prev = head.last_seq, head.digest
    lines: list[bytes] = []
    records: list[Record] = []
    ids: list[str] = []
    for event, body, tag in events:
        seq += 1
        line, digest = frame_line(seq - 1, sid_json, seq, ts, prev, json_string(tag), body)
        if len(line) > max_line:
            raise LineTooLarge(
                f"{tag} event of session {sid} seq {seq} encodes to {len(line)} bytes, over the cluster's "
                f"{max_line}-byte message limit (large parts go to blobs; this event has none to move)"
            )
        lines.append(line)
        records.append(Record(seq - 1, sid, seq, ts, prev, event, SCHEMA_VERSION, tag))  # type: ignore[arg-type]
        ids.append(f"{token}.{seq}.{digest}")
        prev = digest
    return Framed(lines, records, ids, prev)


async def settle(reader: DirectReader, subject: str, head: Head, framed: Framed) -> int | Head | None:
    """After a doubtful reply: the stream seq of our last line if stored, the new head if another
    writer's lines follow `head`, None if nothing follows it (not stored)."""
    after = await reader.page(subject, head.stream_seq + 1, len(framed.lines))
    if not after:
        return None
    if after[0].data == framed.lines[0]:
        if len(after) == len(framed.lines) and all(
            a.data == line for a, line in zip(after, framed.lines, strict=True)
        ):
            return after[-1].stream_seq
        raise ClusterError(f"{subject}: part of an atomic batch is stored, not all of it")
    return head_of(await reader.last(subject))


async def publish_call(
    nc: Client,
    reader: DirectReader,
    sid: str,
    subject: str,
    head: Head,
    framed: Framed,
    *,
    timeout_s: float,
    request_timeout_s: float,
    elapsed_s: float = 0.0,
) -> int:
    """Publish a framed call until stored (returns its last stream seq), fenced, refused or timed out.

    `elapsed_s`: how long the call was under way before (a fast batch that
    went unanswered), for `attempt_timeout`. Raises `SessionFenced` when
    another writer's lines follow the head, `ClusterError` for a refusal
    that a resend cannot cure, `AppendTimeout` when `timeout_s` passed with
    the outcome unknown (it may still be stored).
    """
    loop = asyncio.get_running_loop()
    begun = loop.time() - elapsed_s
    deadline = loop.time() + timeout_s
    pause = 0.05
    last = "no attempt"
    while True:
        left = deadline - loop.time()
        if left <= 0:
            raise AppendTimeout(f"session {sid}: no acknowledgement within {timeout_s} s ({last})")
        outcome = await publish_batch(
            nc,
            subject,
            framed.lines,
            framed.msg_ids,
            head.stream_seq,
            attempt_timeout(loop.time() - begun, left, request_timeout_s),
        )
        if outcome.kind == "stored":
            return outcome.seq
        if outcome.kind == "refused":
            raise ClusterError(
                f"session {sid}: the cluster refused the append: {outcome.code} {outcome.description}"
            )
        last = f"{outcome.kind} {outcome.code or ''} {outcome.description}".strip()
        try:
            read_s = attempt_timeout(loop.time() - begun, deadline - loop.time(), request_timeout_s)
            async with asyncio.timeout(read_s):  # a dead leader never completes the read either
                settled = await settle(reader, subject, head, framed)
        except (TimeoutError, NatsError, ClusterError, OSError) as exc:
            log.info("cairn: %s: cannot read the subject yet (%s); sending again", sid, exc)
            settled = None
        if isinstance(settled, int):
            return settled
        if isinstance(settled, Head):
            raise SessionFenced(sid, head.last_seq, settled.last_seq)
        await asyncio.sleep(min(pause, max(0.0, deadline - loop.time())))
        pause = min(pause * 2, 1.0)
