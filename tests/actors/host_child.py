"""A host process for the crash tests: many sessions running turns until it is SIGKILLed.

    python -m tests.actors.host_child --store DIR --sessions N --seed S [--hang-on-checkpoint]

Each session runs turns in its own client thread (tool calls on the scripted
agent, compactions as the window fills). Every record a turn's stream
delivers has been acknowledged by the journal; the child reports it at once
on stdout as `ack <sid> <seq> <hash>` (one write per line, atomic in a pipe).

With `--hang-on-checkpoint`, the disk's fsync looks at the bytes it is about
to make durable: when they hold a `checkpoint-committed` line, the child
prints `hang <segment> <synced bytes>` and blocks there forever, so the
parent can kill it while a checkpoint is being written.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import threading
from pathlib import Path

import msgspec

from cairn.events.codec import Record
from tests.actors.helpers import SETTINGS, Clock, open_host, scripted

_out_lock = threading.Lock()


def report(line: str) -> None:
    with _out_lock:
        os.write(1, line.encode())


def content_hash(record: Record) -> str:
    return hashlib.sha256(msgspec.json.encode(record.event)).hexdigest()[:16]


class WatchfulDisk:
    """fsync that hangs (after saying so) when the bytes it would sync contain a checkpoint."""

    def __init__(self, hang: bool) -> None:
        self.hang = hang
        self.synced: dict[tuple[int, int], int] = {}
        self.forever = threading.Event()

    def fsync(self, fd: int) -> None:
        info = os.fstat(fd)
        key = (info.st_dev, info.st_ino)
        if self.hang and (info.st_mode & 0o170000) == 0o100000:
            start = self.synced.get(key, 0)
            path = os.readlink(f"/proc/self/fd/{fd}")  # the segment's fd is write-only
            with open(path, "rb") as handle:
                handle.seek(start)
                pending = handle.read(info.st_size - start)
            if b'"kind":"checkpoint-committed"' in pending:
                report(f"hang {path} {start}\n")
                self.forever.wait()
        os.fsync(fd)
        self.synced[key] = info.st_size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True)
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--hang-on-checkpoint", action="store_true")
    args = parser.parse_args()
    disk = WatchfulDisk(args.hang_on_checkpoint)
    store = Path(args.store)
    host = open_host(
        store,
        scripted(),
        disk=disk,
        clock=Clock(int(1e12) + args.seed),
        settings=SETTINGS,
        max_live_sessions=args.sessions,
    )
    workspace = store.parent / "ws"

    def client(n: int) -> None:
        rng = random.Random(args.seed * 1000 + n)
        sid = f"crash-{n}"
        turn_no = host.journal.last_seq(sid)
        while True:
            turn_no += 1
            calls = rng.randint(1, 3)
            text = f"step {turn_no}: tools {calls} x {rng.randint(600, 1500)} #{sid}-{args.seed}-{turn_no}"
            turn = host.send(sid, text, workspace=workspace)
            for item in turn.events(timeout=60):
                if isinstance(item, Record):
                    report(f"ack {item.sid} {item.seq} {content_hash(item)}\n")
            turn.result(timeout=60)

    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(args.sessions)]
    for thread in threads:
        thread.start()
    report("ready\n")
    threading.Event().wait()  # until killed


if __name__ == "__main__":
    main()
