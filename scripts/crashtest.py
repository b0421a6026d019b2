"""Crash campaign for the store: SIGKILL a writer at random moments and check every invariant.

    python -m cairn.crashtest --store DIR --kills N --seed S [--mode kill|lose-unsynced|both]

A child process appends events of 200 B to 64 KiB to many sessions from
several threads and reports each acknowledgement (sid, seq, pos, content
hash) to this parent over a pipe as soon as `append` returns, and each
fsync of a segment (its size then) from inside the fsync, before the writer
goes on. The parent SIGKILLs it at a random moment. In `lose-unsynced`
rounds it then also damages the active segment from a random byte past the
last fsync, as a power loss would: the bytes are cut, or left as zeros
(blocks whose size reached the disk but whose data did not); and the
`ACKED` mark goes back to what it was at the child's open (its last fsync),
as a power loss may undo its later, unsynced rewrites (PITFALLS 30). It
then reopens the store and checks:

- the writer opens: nothing acknowledged is missing (a damaged tail past the
  last fsync is never taken for a loss);
- recovery found no corruption, and any invalid bytes it cut were the final
  ones of the last segment (only a final line can be torn);
- every acknowledged event is present with identical content;
- every session's seqs have no gaps and its hash chain holds (verify_store);
- the index equals a rebuild from nothing (verify_store);
- appends continue correctly after the reopen.

Exits 0 only when every invariant held in every round; prints a summary and
leaves the store in DIR.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from cairn.events.codec import decode_envelope
from cairn.events.errors import DecodeError
from cairn.events.kinds import EventBase, SessionStarted, UserMessage
from cairn.events.model import TextPart
from cairn.store import Journal, verify_store
from cairn.store.ack_mark import ACK_MARK
from cairn.store.errors import AcknowledgedDataMissing
from cairn.store.segments import iter_lines, list_segments, segment_name

SEGMENT_BYTES = 256 * 1024
THREADS = 4
SESSIONS_PER_THREAD = 3


def content_hash(event: EventBase) -> str:
    return hashlib.sha256(msgspec.json.encode(event)).hexdigest()[:16]


def _payload(rng: random.Random) -> str:
    size = rng.randint(200, 4_096) if rng.random() < 0.85 else rng.randint(4_096, 64 * 1024)
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789 \n"
    return "".join(rng.choices(alphabet, k=size))


# --- the child: a writer that reports its acknowledgements --------------------------------


def run_child(store: Path, seed: int) -> int:
    out = sys.stdout.fileno()

    def report(line: str) -> None:
        os.write(out, line.encode())  # one write per ack line (< PIPE_BUF: atomic)

    def reporting_fsync(fd: int) -> None:
        """fsync, then tell the parent how much of which segment is durable, before the writer goes on."""
        os.fsync(fd)
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return
        if target.endswith(".jsonl"):
            report(f"synced {os.path.basename(target)} {os.fstat(fd).st_size}\n")

    journal = Journal.open(store, segment_bytes=SEGMENT_BYTES, fsync=reporting_fsync)

    def work(thread: int) -> None:
        rng = random.Random(seed * 1000 + thread)
        sids = [f"crash-{thread}-{n}" for n in range(SESSIONS_PER_THREAD)]
        while True:
            sid = rng.choice(sids)
            last = journal.last_seq(sid)
            events: list[EventBase] = []
            if last == 0:
                events.append(SessionStarted(workspace="/crash", model="m"))
            for _ in range(rng.randint(1, 3)):
                text = TextPart(_payload(rng))
                events.append(UserMessage(message_id=f"m{rng.getrandbits(40)}", content=(text,)))
            records = journal.append(sid, events, expected_seq=last)
            report("".join(f"ack {r.sid} {r.seq} {r.pos} {content_hash(r.event)}\n" for r in records))

    threads = [threading.Thread(target=work, args=(t,), daemon=True) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    report("ready\n")
    for thread in threads:
        thread.join()
    return 0


# --- the parent: kill, damage, reopen, check -------------------------------------------------


@dataclass
class Campaign:
    store: Path
    acked: dict[tuple[str, int], tuple[int, str]] = field(default_factory=dict)
    kills: int = 0
    lost_unsynced_bytes: int = 0
    lose_rounds: int = 0
    zeroed_rounds: int = 0
    torn_tails: int = 0
    torn_bytes: int = 0
    index_rebuilds: int = 0
    failures: list[str] = field(default_factory=list)

    def fail(self, round_no: int, message: str) -> None:
        self.failures.append(f"round {round_no}: {message}")


def _read_acks(
    pipe: object, acks: list[tuple[str, int, int, str]], synced: dict[str, int], ready: threading.Event
) -> None:
    for raw in pipe:  # type: ignore[attr-defined]
        parts = raw.split()
        if parts == ["ready"]:
            ready.set()
        elif len(parts) == 5 and parts[0] == "ack":
            acks.append((parts[1], int(parts[2]), int(parts[3]), parts[4]))
        elif len(parts) == 3 and parts[0] == "synced":
            synced[parts[1]] = max(synced.get(parts[1], 0), int(parts[2]))


def _last_acked_end(log_dir: Path, max_pos: int) -> tuple[Path, int]:
    """The active segment and the byte just past the last acknowledged line in it (0 if none)."""
    active_first = list_segments(log_dir)[-1]
    path = log_dir / segment_name(active_first)
    end = 0
    for offset, raw in iter_lines(path):
        try:
            env = decode_envelope(raw)
        except DecodeError:
            break
        if env.pos <= max_pos:
            end = offset + len(raw)
    return path, end


def run_round(campaign: Campaign, round_no: int, rng: random.Random, mode: str) -> None:
    child = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            "--store",
            str(campaign.store),
            "--seed",
            str(rng.getrandbits(31)),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    acks: list[tuple[str, int, int, str]] = []
    synced: dict[str, int] = {}
    ready = threading.Event()
    reader = threading.Thread(target=_read_acks, args=(child.stdout, acks, synced, ready), daemon=True)
    reader.start()
    if not ready.wait(60):
        child.kill()
        child.wait()
        campaign.fail(round_no, "the child never became ready")
        return
    mark_at_open = (campaign.store / ACK_MARK).read_bytes()  # fsynced by the open, rewritten unsynced later
    time.sleep(rng.uniform(0.0, 0.35))
    child.send_signal(signal.SIGKILL)
    child.wait()
    reader.join(30)
    campaign.kills += 1
    for sid, seq, pos, digest in acks:
        campaign.acked[(sid, seq)] = (pos, digest)

    lose = mode == "lose-unsynced" or (mode == "both" and rng.random() < 0.5)
    if lose:
        max_pos = max((pos for pos, _ in campaign.acked.values()), default=-1)
        path, floor = _last_acked_end(campaign.store / "log", max_pos)
        floor = max(floor, synced.get(path.name, 0))  # only what was never fsynced may be lost
        size = path.stat().st_size
        if size > floor:
            cut = rng.randint(floor, size)
            if rng.random() < 0.5:
                os.truncate(path, cut)
            else:  # the size reached the disk, the data did not: zeros from the cut on
                with open(path, "r+b") as segment:
                    segment.seek(cut)
                    segment.write(bytes(size - cut))
                campaign.zeroed_rounds += 1
            campaign.lost_unsynced_bytes += size - cut
            campaign.lose_rounds += 1
        (campaign.store / ACK_MARK).write_bytes(mark_at_open)

    check(campaign, round_no)


def check(campaign: Campaign, round_no: int) -> None:
    store = campaign.store
    last_segment = segment_name(list_segments(store / "log")[-1])
    try:
        journal = Journal.open(store, segment_bytes=SEGMENT_BYTES)
    except AcknowledgedDataMissing as exc:
        campaign.fail(round_no, f"the writer does not open: {exc}")
        return
    with journal:
        recovery = journal.recovery
        if recovery.corruptions:
            campaign.fail(round_no, f"recovery found corruption: {recovery.corruptions[:3]}")
        if recovery.truncated:
            campaign.torn_tails += 1
            campaign.torn_bytes += recovery.bytes_dropped
            if recovery.tail_at is None or recovery.tail_at[0] != last_segment:
                campaign.fail(round_no, f"a torn region outside the final segment: {recovery.tail_at}")
        if recovery.index_rebuilt:
            campaign.index_rebuilds += 1
        by_session: dict[str, dict[int, str]] = {}
        for (sid, seq), (_, digest) in campaign.acked.items():
            by_session.setdefault(sid, {})[seq] = digest
        for sid, wanted in by_session.items():
            try:
                records = list(journal.read(sid))
            except Exception as exc:  # reported as a failure of this round, never swallowed
                campaign.fail(round_no, f"session {sid} unreadable: {exc}")
                continue
            if [r.seq for r in records] != list(range(1, len(records) + 1)):
                campaign.fail(round_no, f"session {sid} has seq gaps")
            have = {r.seq: content_hash(r.event) for r in records}
            for seq, digest in wanted.items():
                if have.get(seq) != digest:
                    campaign.fail(round_no, f"acknowledged {sid} seq {seq} is missing or changed")
            if journal.load(sid) != journal.replay_full(sid):
                campaign.fail(round_no, f"session {sid}: load differs from a full replay")
        probe = "crash-probe"
        last = journal.last_seq(probe)
        events: list[EventBase] = [SessionStarted(workspace="/p", model="m")] if last == 0 else []
        events.append(UserMessage(message_id=f"probe{round_no}", content=(TextPart("probe"),)))
        records = journal.append(probe, events, expected_seq=last)
        if [r.seq for r in records] != list(range(last + 1, last + 1 + len(events))):
            campaign.fail(round_no, "appends do not continue after the reopen")
    report = verify_store(store)
    if not report.ok:
        campaign.fail(round_no, "verify: " + "; ".join(str(p) for p in report.problems[:3]))
    if report.warnings:
        campaign.fail(round_no, "verify after reopen still warns: " + str(report.warnings[0]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--store", required=True, type=Path)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--mode", choices=["kill", "lose-unsynced", "both"], default="both")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return run_child(args.store, args.seed)
    args.store.mkdir(parents=True, exist_ok=True)
    campaign = Campaign(store=args.store)
    rng = random.Random(args.seed)
    started = time.perf_counter()
    for round_no in range(1, args.kills + 1):
        run_round(campaign, round_no, rng, args.mode)
    elapsed = time.perf_counter() - started
    sessions = len({sid for sid, _ in campaign.acked})
    print(
        f"crashtest: {campaign.kills} kills ({args.mode}, seed {args.seed}) in {elapsed:.1f}s; "
        f"{len(campaign.acked)} acknowledged events in {sessions} sessions all present; "
        f"torn tails cut: {campaign.torn_tails} ({campaign.torn_bytes} bytes); "
        f"unsynced writes dropped: {campaign.lose_rounds} rounds ({campaign.lost_unsynced_bytes} bytes, "
        f"{campaign.zeroed_rounds} of them left as zeros); "
        f"index rebuilds: {campaign.index_rebuilds}"
    )
    for failure in campaign.failures:
        print(f"FAILED {failure}")
    print("ok" if not campaign.failures else f"{len(campaign.failures)} invariant violations")
    return 0 if not campaign.failures else 1


if __name__ == "__main__":
    sys.exit(main())
