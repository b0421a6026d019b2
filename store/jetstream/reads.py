"""Reading the events stream: direct gets, one message or a bounded batch of one subject.

All reads go through `$JS.API.DIRECT.GET.<stream>` (the stream has
`allow_direct`), answered by any replica:

- `last(subject)`: `{"last_by_subj": subject}`, the session's head;
- `at(stream_seq)`: `{"seq": n}`, one message wherever it is;
- `page(subject, from_stream_seq)`: `{"seq", "next_by_subj", "batch",
  "max_bytes"}`, the subject's next messages in stream order, delivered to an
  inbox and ended by a `Status: 204` (EOB) message; bounded in count and
  bytes (a 100 MB batch trips the client's 64 MB slow-consumer limit);
- `locate(subject, session_seq, lo, hi)`: the stream sequence of a
  session's seq by binary search over the stream (a probe is the subject's
  first message at or after a stream sequence): O(log stream) probes, no
  index needed.

`messages` and `requests` count what was read (tests and benches show
O(tail) loading with them). Everything here runs on the connection's event
loop.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from nats.aio.client import Client

from cairn.events.codec import decode_envelope
from cairn.events.errors import DecodeError
from cairn.store.errors import CorruptionError
from cairn.store.jetstream.layout import ClusterError

#: messages per direct-get batch, and the bytes a batch may carry
PAGE_MSGS = 256
PAGE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Stored:
    """One message of the events stream: its stream sequence, subject and payload (a log line)."""

    stream_seq: int
    subject: str
    data: bytes


class DirectReader:
    """Direct gets on one stream over one connection."""

    def __init__(self, nc: Client, stream: str, *, timeout_s: float = 10.0) -> None:
        self._nc = nc
        self._api = f"$JS.API.DIRECT.GET.{stream}"
        self._timeout_s = timeout_s
        self.messages = 0
        self.requests = 0

    async def _one(self, request: dict[str, object]) -> Stored | None:
        self.requests += 1
        reply = await self._nc.request(self._api, json.dumps(request).encode(), timeout=self._timeout_s)
        headers = reply.headers or {}
        status = headers.get("Status")
        if status == "404":
            return None
        if status:
            raise ClusterError(f"direct get {request}: status {status} {headers.get('Description', '')}")
        self.messages += 1
        return Stored(int(headers["Nats-Sequence"]), headers.get("Nats-Subject", ""), reply.data)

    async def last(self, subject: str) -> Stored | None:
        """The subject's last message (None for a subject with none)."""
        return await self._one({"last_by_subj": subject})

    async def at(self, stream_seq: int) -> Stored | None:
        """The message at `stream_seq` (None when there is none)."""
        return await self._one({"seq": stream_seq})

    async def page(self, subject: str, from_stream_seq: int, limit: int = PAGE_MSGS) -> list[Stored]:
        """Up to `limit` messages of `subject` at or after `from_stream_seq`, in stream order."""
        self.requests += 1
        inbox = self._nc.new_inbox()
        sub = await self._nc.subscribe(inbox)
        out: list[Stored] = []
        try:
            request = {
                "seq": max(1, from_stream_seq),
                "next_by_subj": subject,
                "batch": limit,
                "max_bytes": PAGE_BYTES,
            }
            await self._nc.publish(self._api, json.dumps(request).encode(), reply=inbox)
            while True:
                msg = await sub.next_msg(timeout=self._timeout_s)
                headers = msg.headers or {}
                status = headers.get("Status")
                if status in ("204", "404"):
                    break
                if status:
                    raise ClusterError(f"direct get batch of {subject}: status {status}")
                out.append(
                    Stored(int(headers["Nats-Sequence"]), headers.get("Nats-Subject", subject), msg.data)
                )
        finally:
            await sub.unsubscribe()
        self.messages += len(out)
        return out

    async def locate(self, subject: str, session_seq: int, lo: int, hi: int) -> Stored | None:
        """The message of `subject` holding session seq `session_seq`, its stream seq within [lo, hi].

        Binary search: the subject's messages are in stream order and their
        session seqs increase by one, so "the first message at or after X"
        has a session seq that never decreases as X grows.
        """
        while lo < hi:
            mid = (lo + hi) // 2
            found = await self.page(subject, mid, 1)
            if not found:
                hi = mid - 1
                continue
            seq = session_seq_of(found[0])
            if seq == session_seq:
                return found[0]
            if seq < session_seq:
                lo = found[0].stream_seq + 1
            else:
                hi = mid - 1
        found = await self.page(subject, lo, 1)
        if found and session_seq_of(found[0]) == session_seq:
            return found[0]
        return None


def session_seq_of(stored: Stored) -> int:
    """The session seq a stored line names (its envelope, checksum verified)."""
    try:
        return decode_envelope(stored.data).seq
    except DecodeError as exc:
        raise CorruptionError(
            f"unreadable line: {exc}", segment=stored.subject, offset=stored.stream_seq
        ) from exc
