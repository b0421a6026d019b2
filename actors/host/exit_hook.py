"""Closing forgotten hosts at interpreter exit, before Python waits for (or drops) their session threads.

A session actor's `on_stop` records an interrupted turn, so it must run at
exit: a host its embedder dropped without closing is closed here. Every open
host is kept (strong references: a dropped host must still be closed) and
closed by a hook that runs before the interpreter joins non-daemon threads
and before it abandons daemon ones; `Host.close` takes a host out. Where the
hook exists (`available`), the host runs its session actors on daemon
threads (`registry.HostedSession`): the hook stops them; elsewhere they stay
non-daemon, and the interpreter waits for them.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Protocol


class Closable(Protocol):
    def close(self) -> None: ...


_open_hosts: set[Closable] = set()
_lock = threading.Lock()
_installed = False


def _close_all() -> None:
    with _lock:
        hosts = list(_open_hosts)
    for host in hosts:
        with contextlib.suppress(Exception):
            host.close()


def available() -> bool:
    """Whether this interpreter has the hook (`threading._register_atexit`, CPython 3.9 and later)."""
    return callable(getattr(threading, "_register_atexit", None))


def close_at_exit(host: Closable) -> None:
    """Close `host` at interpreter exit *before* Python joins non-daemon threads (session actors).

    `threading._register_atexit` is CPython's hook for exactly that moment
    (it runs before `threading._shutdown` joins the threads, where `atexit`
    would run after); where it is missing, nothing is registered.
    """
    global _installed
    with _lock:
        _open_hosts.add(host)
        if _installed:
            return
        register = getattr(threading, "_register_atexit", None)
        if register is not None:
            with contextlib.suppress(RuntimeError):
                register(_close_all)
        _installed = True


def closed(host: Closable) -> None:
    """`host` was closed: no longer closed at exit."""
    with _lock:
        _open_hosts.discard(host)
