"""Group commit on the cluster: the calls of many sessions in one atomic batch (pure).

The server checks `Nats-Expected-Last-Subject-Sequence` on every message
of an atomic batch that carries it, not only the first (measured on
nats-server 2.15.1: a batch whose second message names a stale sequence is
refused whole, 10071). So calls of different sessions, each guarded by its
own head on its first message, can share one batch: the batch is stored
whole or not at all, and so is every call in it. A session appears at
most once in a batch (the server refuses a batch whose second message on
a subject expects the first: 10164), which holds because a session has one
call under way at a time.

The price of sharing: one stale call makes the whole batch fail. The
appender then sends every call of it again on its own (same message ids,
so one that was stored after all is recognised, and each call's own guard
decides it); fencing is rare (a takeover), so that costs little.

What the batch saves is the per-message work of the client: one reply,
one timer and one settle per batch instead of per event.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: messages one shared batch holds at most (the server's limit is 1,000 a batch)
GROUP_MAX_MSGS = 256
#: calls queued that are sent at once, before the loop's turn ends: with 256 sessions appending, one
#: batch of all of them made the run lock-step (the loop idle while the cluster commits, the cluster
#: idle while the loop frames); two halves overlap, measured 5.4-7.0k -> 6.2-8.6k appends/s on 2 cores
EARLY_SEND_CALLS = 128


@dataclass(frozen=True)
class Part:
    """One call's share of a batch: its lines, their message ids, and its guard (the head's stream seq)."""

    lines: Sequence[bytes]
    msg_ids: Sequence[str]
    expected_stream_seq: int


def group_headers(batch_id: str, parts: Sequence[Part]) -> list[dict[str, str]]:
    """The headers of every message of a batch made of `parts`, in order: each part's first message
    carries its guard, the last message of all the commit."""
    headers: list[dict[str, str]] = []
    for part in parts:
        for index, msg_id in enumerate(part.msg_ids):
            header = {
                "Nats-Batch-Id": batch_id,
                "Nats-Batch-Sequence": str(len(headers) + 1),
                "Nats-Msg-Id": msg_id,
            }
            if index == 0:
                header["Nats-Expected-Last-Subject-Sequence"] = str(part.expected_stream_seq)
            headers.append(header)
    if headers:
        headers[-1]["Nats-Batch-Commit"] = "1"
    return headers


def last_stream_seqs(last: int, sizes: Sequence[int]) -> list[int]:
    """The stream seq of each part's last message, given the batch's last (a batch is stored contiguously)."""
    out: list[int] = []
    seq = last - sum(sizes)
    for size in sizes:
        seq += size
        out.append(seq)
    return out


def chunks(sizes: Sequence[int], limit: int = GROUP_MAX_MSGS) -> list[range]:
    """Consecutive index ranges of parts whose sizes add up to at most `limit` messages each
    (a part larger than `limit` alone in its range)."""
    out: list[range] = []
    start, total = 0, 0
    for index, size in enumerate(sizes):
        if index > start and total + size > limit:
            out.append(range(start, index))
            start, total = index, 0
        total += size
    if start < len(sizes):
        out.append(range(start, len(sizes)))
    return out
