"""SIGKILL a host process running many sessions, mid-turn and mid-checkpoint; restart; check the log.

Invariants after every kill:
- every record a turn's stream delivered (so acknowledged) is in the log, unchanged;
- a session whose log stopped inside a turn gets `turn-failed` (interrupted) when loaded;
- every session continues: a new turn completes;
- the store verifies (checksums, seqs, chains, index equal to a rebuild).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from cairn.events.kinds import TurnFailed
from cairn.store import verify_store
from tests.actors.helpers import WAIT, open_host, scripted
from tests.actors.host_child import content_hash

SESSIONS = 6
ROOT = Path(__file__).resolve().parents[2]


class Child:
    """The host process and what it reported."""

    def __init__(self, store: Path, seed: int, hang: bool) -> None:
        args = [
            sys.executable,
            "-m",
            "tests.actors.host_child",
            "--store",
            str(store),
            "--sessions",
            str(SESSIONS),
            "--seed",
            str(seed),
        ]
        if hang:
            args.append("--hang-on-checkpoint")
        self.process = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.acked: dict[tuple[str, int], str] = {}
        self.hang: tuple[str, int] | None = None
        self._lines = 0
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            parts = raw.decode().split()
            with self._cond:
                if parts[0] == "ack":
                    self.acked[(parts[1], int(parts[2]))] = parts[3]
                    self._lines += 1
                elif parts[0] == "hang":
                    self.hang = (parts[1], int(parts[2]))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_for(self, acks: int = 0, hang: bool = False) -> None:
        with self._cond:
            ok = self._cond.wait_for(
                lambda: (
                    (self.hang is not None if hang else self._lines >= acks)
                    or self.process.poll() is not None
                ),
                timeout=120,
            )
        assert ok and self.process.poll() is None, "the host process ended or stalled before the kill"

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(WAIT)
        self._reader.join(WAIT)


def _check_and_continue(store: Path, acked: dict[tuple[str, int], str]) -> int:
    host = open_host(store, scripted())
    try:
        for (sid, seq), digest in acked.items():
            records = list(host.journal.read(sid, seq, seq))
            assert records and content_hash(records[0]) == digest, f"{sid} seq {seq} lost or changed"
        marked = 0
        for n in range(SESSIONS):
            sid = f"crash-{n}"
            before = host.journal.load(sid)
            state = host.state(sid)  # loading marks an unfinished turn
            assert state.open_turn is None
            if before.open_turn is not None:
                marked += 1
                last = list(host.journal.read(sid, before.last_seq + 1))[-1].event
                assert isinstance(last, TurnFailed) and last.phase == "interrupted"
                assert last.turn_id == before.open_turn.turn_id
            assert host.send(sid, "after the crash: continue").result(WAIT).ok
    finally:
        host.close()
    assert verify_store(store).ok
    return marked


@pytest.mark.slow
def test_sigkill_mid_turn_keeps_every_acknowledged_event(tmp_path: Path) -> None:
    store = tmp_path / "store"
    rng = random.Random(5)
    acked: dict[tuple[str, int], str] = {}
    marked = 0
    for round_no in range(2):
        child = Child(store, seed=round_no + 1, hang=False)
        child.wait_for(acks=rng.randint(60, 240))
        child.kill()
        assert len(child.acked) >= 60
        acked.update(child.acked)
        marked += _check_and_continue(store, acked)
    assert marked >= 1  # the kills did land inside turns


@pytest.mark.slow
@pytest.mark.parametrize("power_loss", [False, True])
def test_sigkill_while_a_checkpoint_is_written(tmp_path: Path, power_loss: bool) -> None:
    store = tmp_path / "store"
    child = Child(store, seed=11, hang=True)
    child.wait_for(hang=True)
    child.kill()
    assert child.hang is not None
    segment, synced = child.hang
    with open(segment, "rb") as handle:  # the checkpoint really was on its way to the disk
        handle.seek(synced)
        assert b'"kind":"checkpoint-committed"' in handle.read()
    if power_loss:  # the unsynced bytes, the checkpoint among them, never reached the disk
        os.truncate(segment, synced)
    with_checkpoint = open_host(store, scripted())
    try:
        sessions = [f"crash-{n}" for n in range(SESSIONS)]
        open_turns = [sid for sid in sessions if with_checkpoint.journal.load(sid).open_turn is not None]
    finally:
        with_checkpoint.close()
    assert open_turns  # the session writing the checkpoint was mid-turn
    assert _check_and_continue(store, child.acked) == len(open_turns)
