"""Reading the events stream: direct gets, one message or a bounded batch of one subject.

Bulk reads go through `$JS.API.DIRECT.GET.<stream>` (the stream has
`allow_direct`), answered by ANY replica. A follower never gives a wrong
message (it applies only committed entries) but may lag behind the leader:
it can answer "none" for a message that is stored, or a short page. So
whatever decides how far a session goes asks the stream leader
(`$JS.API.STREAM.MSG.GET.<stream>`), and a direct answer that stops short
is completed by the leader; a read never reports a gap, or misses a line,
that was acknowledged before it started:

- `last(subject)`: `{"last_by_subj": subject}` from the leader, the session's
  head (the writer's fence and every read's end);
- `at(stream_seq)`: `{"seq": n}`, one message wherever it is (the leader
  when a replica has none);
- `page(subject, from_stream_seq)`: `{"seq", "next_by_subj", "batch",
  "max_bytes"}`, the subject's next messages in stream order, delivered to an
  inbox and ended by a `Status: 204` (EOB) message; bounded in count and
  bytes (a 100 MB batch trips the client's 64 MB slow-consumer limit); a
  page shorter than asked is completed by the leader, one message a request,
  until it is full or the leader has no more;
- `locate(subject, session_seq, lo, hi)`: the stream sequence of a
  session's seq by binary search over the stream (a probe is the subject's
  first message at or after a stream sequence): O(log stream) probes, no
  index needed.

`messages` and `requests` count what was read (tests and benches show
O(tail) loading with them). Everything here runs on the connection's event
loop.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from dataclasses import dataclass

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import Error as NatsError

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
        self._leader_api = f"$JS.API.STREAM.MSG.GET.{stream}"
        self._timeout_s = timeout_s
        self.messages = 0
        self.requests = 0
        #: pages no replica answered (503), completed from the leader
        self.unanswered = 0

    async def _request(self, api: str, request: dict[str, object]) -> Msg:
        """One request/reply, sent again while nobody answers (a leader being elected, a node
        restarting) until `timeout_s` has passed; then a `ClusterError`, never a raw nats error."""
        deadline = time.monotonic() + self._timeout_s
        pause = 0.05
        while True:
            self.requests += 1
            left = deadline - time.monotonic()
            try:
                return await self._nc.request(api, json.dumps(request).encode(), timeout=max(0.1, left))
            except (NatsError, TimeoutError) as exc:
                if time.monotonic() + pause >= deadline:
                    raise ClusterError(
                        f"no answer to {api} {request} in {self._timeout_s} s: {exc!r}"
                    ) from exc
            await asyncio.sleep(pause)
            pause = min(pause * 2, 1.0)

    async def _one(self, request: dict[str, object]) -> Stored | None:
        reply = await self._request(self._api, request)
        headers = reply.headers or {}
        status = headers.get("Status")
        if status == "404":
            return None
        if status:
            raise ClusterError(f"direct get {request}: status {status} {headers.get('Description', '')}")
        self.messages += 1
        return Stored(int(headers["Nats-Sequence"]), headers.get("Nats-Subject", ""), reply.data)

    async def _from_leader(self, request: dict[str, object]) -> Stored | None:
        """One message as the stream leader has it (None: the leader has none)."""
        self.requests += 1
        reply = await self._nc.request(
            self._leader_api, json.dumps(request).encode(), timeout=self._timeout_s
        )
        try:
            answer = json.loads(reply.data)
        except ValueError as exc:
            raise ClusterError(f"message get {request}: unreadable answer {reply.data[:200]!r}") from exc
        error = answer.get("error")
        if error:
            if error.get("code") == 404:
                return None
            raise ClusterError(f"message get {request}: {error.get('code')} {error.get('description', '')}")
        message = answer["message"]
        self.messages += 1
        return Stored(int(message["seq"]), message["subject"], base64.b64decode(message.get("data") or b""))

    async def last(self, subject: str) -> Stored | None:
        """The subject's last message as the leader has it (None for a subject with none)."""
        return await self._from_leader({"last_by_subj": subject})

    async def at(self, stream_seq: int) -> Stored | None:
        """The message at `stream_seq` (None when there is none, the leader asked when a replica had none)."""
        found = await self._one({"seq": stream_seq})
        if found is None:
            found = await self._from_leader({"seq": stream_seq})
        return found

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
                if status == "503":
                    # no replica answered the direct get (seen under load, on a stream made moments
                    # before: `cairn export` failed on it): the leader completes the page below
                    self.unanswered += 1
                    break
                if status:
                    raise ClusterError(f"direct get batch of {subject}: status {status}")
                out.append(
                    Stored(int(headers["Nats-Sequence"]), headers.get("Nats-Subject", subject), msg.data)
                )
        finally:
            await sub.unsubscribe()
        self.messages += len(out)
        while len(out) < limit:  # a replica behind the leader stops short: the leader completes it
            start = out[-1].stream_seq + 1 if out else max(1, from_stream_seq)
            found = await self._from_leader({"seq": start, "next_by_subj": subject})
            if found is None:
                break
            out.append(found)
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
