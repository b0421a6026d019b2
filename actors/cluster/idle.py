"""Giving back idle sessions: a host releases the lease of a session it no longer runs.

A host keeps renewing the lease of every session it serves (one write per
session per third of the TTL), also after the `Host` passivated its idle
actor. `release_idle` frees the leases of sessions with no live actor and
no message being routed or served here, so a host's renewals follow its
working set, not every session it ever served. A later message for such a
session is claimed again like any free one (a new `owner-changed`, a replay).

`SessionUse` is the bookkeeping that makes the release safe: a message
routed here `enter`s its session (waiting while that session's release
is under way) and `leave`s it when its turn's stream ended; a release
begins only for a session nobody uses. A forwarded message, answered on
the event loop, uses `try_enter`, which never waits (a session being
released is not taken: the forwarder waits for the release and claims it).

Thread-safety: every method may be called from any thread.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
from collections.abc import Iterable, Iterator

from cairn.actors.cluster.ownership import Ownership

log = logging.getLogger("cairn.cluster")


class SessionUse:
    """Sessions with a message in flight on this host, and those being released (see the module doc)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._using: collections.Counter[str] = collections.Counter()
        self._releasing: set[str] = set()

    @contextlib.contextmanager
    def using(self, sid: str) -> Iterator[None]:
        """Hold `sid` in use for the block (after any release of it ended)."""
        self.enter(sid)
        try:
            yield
        finally:
            self.leave(sid)

    def enter(self, sid: str) -> None:
        """Hold `sid` in use (after any release of it ended); `leave` it after."""
        with self._cond:
            while sid in self._releasing:
                self._cond.wait()
            self._using[sid] += 1

    def try_enter(self, sid: str) -> bool:
        """Hold `sid` in use unless it is being released (never waits); `leave` it after."""
        with self._cond:
            if sid in self._releasing:
                return False
            self._using[sid] += 1
            return True

    def leave(self, sid: str) -> None:
        with self._cond:
            self._using[sid] -= 1
            if self._using[sid] <= 0:
                del self._using[sid]

    @contextlib.contextmanager
    def releasing(self, sid: str) -> Iterator[bool]:
        """Yield whether `sid` may be released now (unused); while the block runs, nobody enters it."""
        with self._cond:
            free = self._using[sid] == 0
            if free:
                self._releasing.add(sid)
        try:
            yield free
        finally:
            if free:
                with self._cond:
                    self._releasing.discard(sid)
                    self._cond.notify_all()


def release_idle(ownership: Ownership, live: Iterable[str], use: SessionUse) -> int:
    """Release the lease of each session held here with no live actor and no message in flight."""
    running = set(live)
    released = 0
    for sid in ownership.keeper.held():
        if sid in running:
            continue
        with use.releasing(sid) as free:
            if not free:
                continue
            try:
                released += ownership.release(sid)
            except Exception as exc:  # the bucket did not answer: the lease expires after its TTL
                log.warning("cairn: releasing the idle session %r: %s: %s", sid, type(exc).__name__, exc)
    return released
