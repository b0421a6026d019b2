"""The loop side of `JetStreamJournal.append`: each call framed on its session's head and published.

`Submissions` hands `begin` a session's calls one at a time, in order;
`begin` returns once the call is under way and `finished` is told its
outcome later. Two paths, one guarantee (`writer`: one guarded publish,
message ids, every doubtful reply settled by reading):

- the fast path: a call on a head this journal knows (it wrote the
  session's last line), moving no checkpoint pointer: framed at once and
  queued; once per turn of the loop (or as soon as `EARLY_SEND_CALLS` are
  queued) the queued calls of all sessions go out together, as one guarded
  publish when alone, else as shared atomic batches (`group`: each call
  guarded by its own head, the batch stored whole or not at all), with one
  reply per batch routed by the `AckInbox`; a stored reply finishes every
  call in the batch;
- the full path (a task): any other call, and each call of a fast batch
  whose reply was not "stored" (lost, duplicate, wrong last sequence, no
  leader, refused): the head read when unknown, `writer.publish_call`
  (resent with the same ids until stored, fenced, refused or timed out),
  then the pointer moved when the call holds a checkpoint or a
  `session-started`.

A fast call that failed over to the full path is published again with the
same message ids on the same head, so the duplicate window or the read
that settles it tells whether its batch was stored after all: never twice.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import uuid
from collections.abc import Awaitable, Callable

import msgspec
from nats.aio.client import Client
from nats.js.kv import KeyValue

from cairn.events.codec import Record
from cairn.store.errors import AppendTimeout, SeqConflict
from cairn.store.jetstream.acks import AckInbox
from cairn.store.jetstream.batch import Outcome
from cairn.store.jetstream.group import (
    EARLY_SEND_CALLS,
    GROUP_MAX_MSGS,
    Part,
    chunks,
    group_headers,
    last_stream_seqs,
)
from cairn.store.jetstream.layout import Layout
from cairn.store.jetstream.names import session_token
from cairn.store.jetstream.pointer import Pointer, advanced, get_pointer, matters, put_pointer
from cairn.store.jetstream.reads import DirectReader
from cairn.store.jetstream.submit import Pending
from cairn.store.jetstream.writer import (
    Framed,
    Head,
    attempt_timeout,
    frame_call,
    head_of,
    log,
    publish_call,
)

#: sessions whose head this journal keeps (least recently used out)
CACHED_HEADS = 4_096

Finished = Callable[[Pending, "list[Record] | None", "BaseException | None"], Awaitable[None]]


class _Call(msgspec.Struct, frozen=True):
    """A call framed on a head, with the names it is published under."""

    pending: Pending
    subject: str
    token: str
    head: Head
    framed: Framed
    deadline: float


class Appender:
    """Writes the calls `Submissions` begins (see the module doc); runs on the connection's loop."""

    def __init__(
        self,
        nc: Client,
        reader: DirectReader,
        layout: Layout,
        pointers: KeyValue,
        *,
        request_timeout_s: float,
        max_line: int,
        finished: Finished,
    ) -> None:
        self._nc = nc
        self._reader = reader
        self._layout = layout
        self._pointers = pointers
        self._request_timeout_s = request_timeout_s
        self._max_line = max_line
        self._finished = finished
        self._heads: collections.OrderedDict[str, Head] = collections.OrderedDict()
        self._inbox = AckInbox(nc)
        #: calls begun since the last flush, and whether a flush is due
        self._group: list[_Call] = []
        self._flush_due = False
        self._tasks: set[asyncio.Task[None]] = set()
        #: calls finished on the fast path (tests and benches)
        self.fast = 0

    async def begin(self, pending: Pending) -> None:
        """Start `pending` (its session has no other call under way); `finished` gets its outcome.

        Raises what fails before anything is sent (a line too large), for
        the caller to resolve the call with.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + pending.timeout_s
        head = self._heads.get(pending.sid)
        if head is None or head.last_seq != pending.expected:
            self._spawn(pending, self._full(pending, deadline))
            return
        call = self._frame(pending, head, deadline)
        if matters(call.framed.records) or len(call.framed.lines) > GROUP_MAX_MSGS:
            self._spawn(pending, self._publish(call))
            return
        self._group.append(call)
        if len(self._group) >= EARLY_SEND_CALLS:  # the cluster commits this one while the loop frames more
            calls, self._group = self._group, []
            await self._send(calls)
            await asyncio.sleep(0)  # let the connection write it now
            return
        if not self._flush_due:
            self._flush_due = True
            loop.call_soon(self._flush)

    def _frame(self, pending: Pending, head: Head, deadline: float) -> _Call:
        token = session_token(pending.sid)
        framed = frame_call(pending.sid, token, head, pending.events, pending.ts, self._max_line)
        return _Call(pending, f"{self._layout.prefix}.{token}", token, head, framed, deadline)

    def _flush(self) -> None:
        """Send the calls begun since the last flush (once per turn of the loop), grouped in batches."""
        self._flush_due = False
        calls, self._group = self._group, []
        if not calls:
            return  # sent early already
        task = asyncio.get_running_loop().create_task(self._send(calls))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, calls: list[_Call]) -> None:
        now = asyncio.get_running_loop().time()
        timeout_s = attempt_timeout(0.0, min(c.deadline for c in calls) - now, self._request_timeout_s)
        if len(calls) == 1 and len(calls[0].framed.lines) == 1:  # alone: a plain guarded publish
            call = calls[0]
            headers = {
                "Nats-Msg-Id": call.framed.msg_ids[0],
                "Nats-Expected-Last-Subject-Sequence": str(call.head.stream_seq),
            }
            message = (call.subject, call.framed.lines[0], headers)
            await self._inbox.send([message], timeout_s, functools.partial(self._settle, calls))
            return
        for span in chunks([len(c.framed.lines) for c in calls]):
            part = calls[span.start : span.stop]
            parts = [Part(c.framed.lines, c.framed.msg_ids, c.head.stream_seq) for c in part]
            batch_headers = group_headers(uuid.uuid4().hex, parts)
            lines = [(c.subject, line) for c in part for line in c.framed.lines]
            messages = [(subject, line, h) for (subject, line), h in zip(lines, batch_headers, strict=True)]
            await self._inbox.send(messages, timeout_s, functools.partial(self._settle, part))

    async def _settle(self, calls: list[_Call], outcome: Outcome) -> None:
        """A batch's reply: stored, every call in it is finished; else each is sent again on its own."""
        if outcome.kind != "stored":
            for call in calls:
                self._spawn(call.pending, self._publish(call))
            return
        lasts = last_stream_seqs(outcome.seq, [len(c.framed.lines) for c in calls])
        self.fast += len(calls)
        for call, last in zip(calls, lasts, strict=True):
            self._remember(call, last)
            await self._finished(call.pending, call.framed.records, None)

    def _spawn(self, pending: Pending, work: Awaitable[list[Record]]) -> None:
        """Run `work` for `pending` in a task of its own; `finished` gets the outcome."""

        async def run() -> None:
            try:
                records = await work
            except Exception as exc:
                await self._finished(pending, None, exc)
            else:
                await self._finished(pending, records, None)

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _full(self, pending: Pending, deadline: float) -> list[Record]:
        """The full path from the start: the head read unless known, then `_publish`."""
        subject = self._layout.subject(pending.sid)
        head = self._heads.get(pending.sid)
        if head is None or head.last_seq != pending.expected:
            head = head_of(await self._reader.last(subject))
            self._heads[pending.sid] = head
            self._trim()
        if head.last_seq != pending.expected:
            raise SeqConflict(pending.sid, pending.expected, head.last_seq)
        return await self._publish(self._frame(pending, head, deadline))

    async def _publish(self, call: _Call) -> list[Record]:
        """Publish until stored, fenced, refused or past the call's deadline; then move the pointer."""
        now = asyncio.get_running_loop().time()
        left = call.deadline - now
        if left <= 0:
            raise AppendTimeout(
                f"session {call.pending.sid}: no acknowledgement within {call.pending.timeout_s} s"
            )
        try:
            last_stream = await publish_call(
                self._nc,
                self._reader,
                call.pending.sid,
                call.subject,
                call.head,
                call.framed,
                timeout_s=left,
                request_timeout_s=self._request_timeout_s,
                elapsed_s=now - (call.deadline - call.pending.timeout_s),
            )
        except SeqConflict:
            self._heads.pop(call.pending.sid, None)
            raise
        self._remember(call, last_stream)
        records = call.framed.records
        if matters(records):
            stream_seqs = list(range(last_stream - len(records) + 1, last_stream + 1))  # stored contiguously
            await self._move_pointer(call.token, records, stream_seqs, fresh=call.head.last_seq == 0)
        return records

    def _remember(self, call: _Call, last_stream: int) -> None:
        records = call.framed.records
        self._heads[call.pending.sid] = Head(
            records[-1].seq, call.framed.digest, last_stream, call.pending.ts
        )
        self._heads.move_to_end(call.pending.sid)
        self._trim()

    def _trim(self) -> None:
        while len(self._heads) > CACHED_HEADS:
            self._heads.popitem(last=False)

    async def _move_pointer(
        self, token: str, records: list[Record], stream_seqs: list[int], *, fresh: bool
    ) -> None:
        """Advance the session's checkpoint pointer (derived: a failure is logged, load rebuilds it).

        A new session starts its pointer; an existing one without a pointer
        (lost, or older than it) is left to the next `load`, which replays
        the session once and writes the pointer whole.
        """
        try:
            pointer = await get_pointer(self._pointers, token)
            if pointer is None and fresh:
                pointer = Pointer()
            if pointer is None:
                return
            await put_pointer(self._pointers, token, advanced(pointer, records, stream_seqs))
        except Exception as exc:
            log.warning("cairn: the checkpoint pointer of %s was not updated: %s", token, exc)

    async def cancel(self) -> None:
        """Cancel the full-path tasks (closing): their calls are left to `Submissions.abandon`."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
