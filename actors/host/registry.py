"""The host's live session actors: at most `max_live_sessions`, spawned by replay, passivated when idle.

A session is *busy* while a turn, a compaction or a query it was sent is
unanswered; only idle sessions are passivated: the least recently used one
when a new session needs a slot (LRU), and any that stayed idle longer than
the idle timeout (a sweeper thread, or `passivate_idle()`). Stopping is
free: the state lives in the log, and the next message rebuilds the actor
by replay. When every slot is busy, a new session waits for one (`HostBusy`
after the slot timeout), so the cap is a hard bound. A session actor that
died is noticed on the next message to it and rebuilt.

Bookkeeping is O(1) per spawn and per passivation, however many sessions
are live: the count of live slots and the idle sessions (in the order they
became idle, so the LRU victim is the first) are kept up to date on each
change of an entry, never found by a scan. The idle sweep walks the idle
sessions from the oldest and stops at the first one still fresh. pykka's
process-wide registry of actors, which every actor start and stop updates,
is made O(1) too (`actor_index`).

Hosted session actors run on daemon threads where the exit hook exists
(`exit_hook`): CPython (3.11, 3.12) walks every live non-daemon thread each
time one starts or ends (`threading._maintain_shutdown_locks`), which made a
spawn cost grow with the live sessions; the hook closes every open host at
exit before Python joins its threads, so each `on_stop` still runs.

Thread-safety: every method may be called from any thread. One condition
variable guards the entries; actors are started and stopped outside it.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from typing import Any, Literal

import msgspec
import pykka

from cairn.actors.errors import HostBusy, HostClosed, HostError, HostTimeout, SessionExists
from cairn.actors.host import actor_index, exit_hook
from cairn.actors.host.config import HostConfig
from cairn.actors.session.actor import SessionActor
from cairn.actors.session.messages import Load
from cairn.actors.session.runtime import Runtime

log = logging.getLogger("cairn.host")


class HostStats(msgspec.Struct, kw_only=True):
    """Counters of a host's registry (for tests, benchmarks and dashboards)."""

    spawned: int = 0
    passivated_lru: int = 0
    passivated_idle: int = 0
    rebuilt_after_crash: int = 0
    peak_live: int = 0


class Entry:
    """One session's slot in the registry: its actor once started, and how many calls use it."""

    __slots__ = ("busy", "last_used", "ref", "sid", "state")

    def __init__(self, sid: str, now_ms: int) -> None:
        self.sid = sid
        self.ref: pykka.ActorRef[Any] | None = None
        self.state: Literal["starting", "live", "stopping"] = "starting"
        self.busy = 1
        self.last_used = now_ms


class HostedSession(SessionActor):
    """A session actor started by a host: on a daemon thread when the host is closed at exit."""

    use_daemon_thread = exit_hook.available()


class Registry:
    """The live session actors of one host (see the module doc)."""

    def __init__(self, runtime: Runtime, config: HostConfig) -> None:
        actor_index.install()  # pykka's own registry: O(1) per actor start and stop
        self._rt = runtime
        self._max_live = config.max_live_sessions
        self._idle_ms = int(config.idle_timeout_s * 1000)
        self._ask_timeout = config.ask_timeout_s
        self._slot_timeout = config.slot_timeout_s
        #: every entry, least recently acquired first (`live_sessions`)
        self._entries: collections.OrderedDict[str, Entry] = collections.OrderedDict()
        #: the live entries no call uses, in the order they became idle (the LRU victim first)
        self._idle: collections.OrderedDict[str, Entry] = collections.OrderedDict()
        #: entries that hold a slot (`starting` or `live`): what `max_live_sessions` bounds
        self._live = 0
        self._cond = threading.Condition()
        self._closed = False
        self.stats = HostStats()
        self._stop_sweep = threading.Event()
        self._sweeper: threading.Thread | None = None
        if config.sweep and config.idle_timeout_s > 0:
            interval = max(0.05, min(config.idle_timeout_s / 4, 5.0))
            self._sweeper = threading.Thread(
                target=self._sweep, args=(interval,), name="cairn-host-sweeper", daemon=True
            )
            self._sweeper.start()

    # -- taking and giving back a session ----------------------------------------------------

    def acquire(self, sid: str) -> Entry:
        """The live entry of `sid`, marked busy; spawned by replay (evicting LRU) when needed."""
        deadline = time.monotonic() + self._slot_timeout
        while True:
            victim: Entry | None = None
            with self._cond:
                if self._closed:
                    raise HostClosed("the host is closed")
                entry = self._entries.get(sid)
                if entry is not None:
                    if entry.state != "live":
                        self._wait(deadline, sid)
                        continue
                    assert entry.ref is not None
                    if entry.ref.is_alive():
                        if entry.busy == 0:
                            del self._idle[sid]
                        entry.busy += 1
                        self._entries.move_to_end(sid)
                        return entry
                    self._drop(entry)  # crashed: rebuilt below by replay
                    self.stats.rebuilt_after_crash += 1
                    log.warning("cairn: a session actor had died; rebuilding it from its log")
                if self._live >= self._max_live:
                    victim = next(iter(self._idle.values()), None)
                    if victim is None:
                        self._wait(deadline, sid)
                        continue
                    self._mark_stopping(victim)
                    self.stats.passivated_lru += 1
                entry = Entry(sid, self._rt.clock_ms())
                self._entries[sid] = entry
                self._live += 1
            if victim is not None:
                self._stop_entry(victim)
            return self._start(entry)

    def release(self, entry: Entry) -> None:
        """A call that used `entry` is done with it."""
        with self._cond:
            entry.busy -= 1
            entry.last_used = self._rt.clock_ms()
            if entry.busy == 0 and entry.state == "live" and self._entries.get(entry.sid) is entry:
                self._idle[entry.sid] = entry
            self._cond.notify_all()

    def evict(self, sid: str) -> None:
        """Stop `sid`'s actor if it is live and idle (a fork target must not have a stale one)."""
        with self._cond:
            entry = self._entries.get(sid)
            if entry is None:
                return
            if entry.state != "live" or entry.busy:
                raise SessionExists(f"session {sid} is in use")
            self._mark_stopping(entry)
        self._stop_entry(entry)

    def stop(self, sid: str) -> bool:
        """Stop `sid`'s actor now, busy or not (a turn it runs ends interrupted); False when none ran.

        Waits for an actor that is starting (its load is bounded by the ask
        timeout). Calls that still hold the entry release it as usual; the
        next message for `sid` rebuilds the session by replay.
        """
        with self._cond:
            while True:
                entry = self._entries.get(sid)
                if entry is None or self._closed:
                    return False
                if entry.state == "live":
                    self._mark_stopping(entry)
                    break
                self._cond.wait(0.5)  # starting, or another stop in progress: notified when it ends
        self._stop_entry(entry)
        return True

    # -- passivation and closing -------------------------------------------------------------------

    def passivate_idle(self, now_ms: int | None = None) -> int:
        """Stop every session idle for longer than the idle timeout; returns how many.

        Walks the idle sessions from the one idle longest and stops at the
        first that is not due: the cost is the sessions passivated, not the
        sessions live. (Should the clock step back, a session released after
        it waits for the ones before it: passivated later, never wrongly.)
        """
        now = now_ms if now_ms is not None else self._rt.clock_ms()
        with self._cond:
            victims: list[Entry] = []
            for entry in self._idle.values():
                if now - entry.last_used < self._idle_ms:
                    break
                victims.append(entry)
            for entry in victims:
                self._mark_stopping(entry)
            self.stats.passivated_idle += len(victims)
        self._stop_entries(victims)
        return len(victims)

    @property
    def live_sessions(self) -> list[str]:
        """Sessions with a live actor, least recently used first."""
        with self._cond:
            return [sid for sid, entry in self._entries.items() if entry.state != "stopping"]

    @property
    def closed(self) -> bool:
        """Whether `close` ran: no session is taken any more."""
        return self._closed

    def close(self) -> bool:
        """Take no new session; stop every actor, most recently used first. False when already closed."""
        with self._cond:
            if self._closed:
                return False
            self._closed = True
            self._cond.notify_all()
        self._stop_sweep.set()
        if self._sweeper is not None:
            self._sweeper.join(timeout=10)
        while True:
            with self._cond:
                entries = [e for e in reversed(self._entries.values()) if e.state == "live"]
                for entry in entries:
                    self._mark_stopping(entry)
                starting = any(e.state == "starting" for e in self._entries.values())
            self._stop_entries(entries)
            if not entries and not starting:
                return True
            if not entries:
                with self._cond:
                    self._cond.wait(0.05)

    # -- inside ---------------------------------------------------------------------------------

    def _mark_stopping(self, entry: Entry) -> None:
        """A live entry is to be stopped: it gives up its slot now (under the lock)."""
        entry.state = "stopping"
        self._idle.pop(entry.sid, None)
        self._live -= 1

    def _drop(self, entry: Entry) -> None:
        """Take out an entry that still held a slot (its actor died, or never started; under the lock)."""
        del self._entries[entry.sid]
        self._idle.pop(entry.sid, None)
        self._live -= 1

    @property
    def counts(self) -> tuple[int, int]:
        """(slots held, idle live sessions): what the cap and the LRU choice read (for tests)."""
        with self._cond:
            return self._live, len(self._idle)

    def _wait(self, deadline: float, sid: str) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise HostBusy(
                f"no live-session slot for {sid} within {self._slot_timeout} s: all {self._max_live} are busy"
            )
        self._cond.wait(remaining)

    def _start(self, entry: Entry) -> Entry:
        """Spawn the actor of a `starting` entry (outside the lock) and make it live."""
        sid = entry.sid
        try:
            ref = self._spawn(sid)
        except BaseException:
            with self._cond:
                if self._entries.get(sid) is entry:
                    self._drop(entry)
                self._cond.notify_all()
            raise
        with self._cond:
            entry.ref = ref
            entry.state = "live"
            self.stats.spawned += 1
            self.stats.peak_live = max(self.stats.peak_live, self._live)
            self._cond.notify_all()
            closed = self._closed
        if closed:
            self.release(entry)
            raise HostClosed("the host was closed while the session started")
        return entry

    def _spawn(self, sid: str) -> pykka.ActorRef[Any]:
        ref = HostedSession.start(sid, self._rt)
        try:
            ref.ask(Load(), timeout=self._ask_timeout)
        except BaseException as exc:
            with contextlib.suppress(Exception):
                ref.stop(block=True, timeout=self._rt.stop_timeout_s)
            if isinstance(exc, pykka.Timeout):
                raise HostTimeout(f"session {sid} did not load within {self._ask_timeout} s") from None
            if isinstance(exc, pykka.ActorDeadError):
                raise HostError(f"session {sid} could not start") from exc
            raise
        return ref

    def _stop_entry(self, entry: Entry) -> None:
        """Stop an entry marked `stopping` (outside the lock), then drop it from the registry."""
        self._stop_entries([entry])

    def _stop_entries(self, entries: list[Entry]) -> None:
        """Stop entries marked `stopping` (outside the lock) all at once, waiting at most the stop
        timeout for all of them together (a turn held by a hung provider delays its own session's
        stop, not the others'), then drop them from the registry."""
        stopping: list[tuple[Entry, pykka.Future[Any] | None]] = []
        for entry in entries:
            try:
                stopping.append((entry, entry.ref.stop(block=False) if entry.ref is not None else None))
            except Exception as exc:
                log.warning("cairn: a session actor did not stop cleanly: %s", type(exc).__name__)
                stopping.append((entry, None))
        deadline = time.monotonic() + self._rt.stop_timeout_s
        for entry, stopped in stopping:
            if stopped is not None:
                try:
                    stopped.get(timeout=max(0.0, deadline - time.monotonic()))
                except Exception as exc:
                    log.warning("cairn: a session actor did not stop cleanly: %s", type(exc).__name__)
            with self._cond:
                if self._entries.get(entry.sid) is entry:
                    del self._entries[entry.sid]
                self._cond.notify_all()

    def _sweep(self, interval: float) -> None:
        while not self._stop_sweep.wait(interval):
            try:
                self.passivate_idle()
            except Exception as exc:  # the sweeper must outlive one bad round
                log.warning("cairn: idle passivation failed: %s", type(exc).__name__)
