"""`verify_cluster`: the offline checks of a cairn store on a JetStream cluster.

Per session (every subject of the events stream), every stored line goes
through the local log's line checks: frame, CRC-32C, envelope, version,
kind and body (`events.codec.decode_line`), then seq gaps and duplicates,
`pos == seq - 1` (the cluster's meaning of pos, see `writer`), the
per-session hash chain (`prev` names the previous line's digest), the
session the line names against its subject, and every blob part against the
object store (present, of its size). Findings are `store.verify.Problem`s,
with the subject as the "segment" and the stream sequence as the "offset".
Unlike a read, a bad line does not stop the session's check: each is named.
"""

from __future__ import annotations

import msgspec

from cairn.events.codec import GENESIS, chain_digest, decode_envelope, decode_line, ts_in_range
from cairn.events.errors import DecodeError
from cairn.store.blobs import blob_refs
from cairn.store.jetstream.journal import JetStreamJournal
from cairn.store.jetstream.reads import PAGE_MSGS, Stored
from cairn.store.verify_report import Problem


class ClusterVerifyReport(msgspec.Struct, kw_only=True):
    """What `verify_cluster` found; `ok` when there is no problem."""

    stream: str
    sessions: int = 0
    lines: int = 0
    bytes: int = 0
    blobs: int = 0
    problems: list[Problem] = []

    @property
    def ok(self) -> bool:
        return not self.problems


class _Check:
    """The running check of one session: what the next line must be."""

    def __init__(self, sid: str) -> None:
        self.sid = sid
        self.seq = 0
        self.digest = GENESIS
        self.problems: list[Problem] = []
        self.blobs: dict[tuple[str, int], None] = {}

    def line(self, stored: Stored) -> None:
        def problem(code: str, message: str, seq: int = 0) -> None:
            self.problems.append(
                Problem(
                    code=code,
                    message=message,
                    segment=stored.subject,
                    offset=stored.stream_seq,
                    sid=self.sid,
                    seq=seq,
                )
            )

        try:
            record = decode_line(stored.data)
        except DecodeError as exc:
            try:
                seq = decode_envelope(stored.data).seq
            except DecodeError:
                seq = 0
            problem("corrupt-line", str(exc), seq)
            return
        if record.sid != self.sid:
            problem(
                "wrong-session", f"a line of session {record.sid!r} on this session's subject", record.seq
            )
            return
        if record.seq <= self.seq:
            problem("seq-duplicate", f"seq {record.seq} after seq {self.seq}", record.seq)
            return
        if record.seq != self.seq + 1:
            problem("seq-gap", f"seq {record.seq} follows seq {self.seq}", record.seq)
        elif record.prev != self.digest:
            problem("chain", "prev does not name the session's previous line", record.seq)
        if not ts_in_range(record.ts):
            problem("bad-ts", f"ts {record.ts} is outside 0..2**63-1 unix ms", record.seq)
        if record.pos != record.seq - 1:
            problem("pos", f"pos {record.pos} where {record.seq - 1} (seq - 1) was expected", record.seq)
        self.seq = record.seq
        self.digest = chain_digest(stored.data)
        for ref in blob_refs(record.event):
            self.blobs[(ref.sha256, ref.size)] = None


def verify_cluster(journal: JetStreamJournal) -> ClusterVerifyReport:
    """Check every session of the cluster store `journal` reads (see the module doc)."""
    report = ClusterVerifyReport(stream=journal.layout.stream)
    checked_blobs: dict[tuple[str, int], str | None] = {}
    for sid in journal.session_ids():
        check = _Check(sid)
        subject = journal.layout.subject(sid)
        start = 1
        while True:
            page = journal._call(journal._reader.page(subject, start, PAGE_MSGS))
            if not page:
                break
            for stored in page:
                report.lines += 1
                report.bytes += len(stored.data)
                check.line(stored)
            if len(page) < PAGE_MSGS:
                break  # a short page is the end: the leader completed it (reads.page)
            start = page[-1].stream_seq + 1
        report.sessions += 1
        report.problems += check.problems
        for sha, size in check.blobs:
            if (sha, size) not in checked_blobs:
                found = journal.blob_size(sha)
                checked_blobs[(sha, size)] = (
                    None
                    if found == size
                    else f"blob {sha} of {size} bytes: "
                    + (
                        "missing from the cluster"
                        if found is None
                        else f"the object store holds {found} bytes"
                    )
                )
            trouble = checked_blobs[(sha, size)]
            if trouble is not None:
                report.problems.append(Problem(code="blob", message=trouble, sid=sid))
    report.blobs = len(checked_blobs)
    return report
