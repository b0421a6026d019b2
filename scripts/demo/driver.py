"""The run of the demo: the store prepared, every session's turns on one host, then the store reopened.

`run` composes three steps: `_run_live` (one host, a client thread per
session, stopped at the end: closed, not killed), `_replay_reports` (the
store reopened, every session compared with what it was live) and
`report.summarize`.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cairn import Host, HostConfig, SessionSettings, WorkspaceTools
from cairn.actors.session.request import AssembledRequest
from cairn.demo.clients import Live, TurnOutcome, send_turns
from cairn.demo.errors import DemoSetupError, DemoStoreFailed
from cairn.demo.progress import show_progress
from cairn.demo.providers import Setup, scripted_setup
from cairn.demo.report import SessionReport, session_report, summarize
from cairn.demo.workspace import make_workspace
from cairn.events.state import SessionState
from cairn.store.files import private_dir
from cairn.store.segments import FsyncFn


def _check_sessions(host: Host, sids: list[str], settings: SessionSettings) -> None:
    """A demo continues only sessions of the same model and window (settings come from the log)."""
    where = getattr(host.journal, "root", "the store")  # a local journal's directory
    for sid in sids:
        if host.journal.last_seq(sid) == 0:
            continue
        info = host.state(sid).info
        wanted = (settings.model, settings.context_window)
        if info is not None and (info.model, info.context_window) != wanted:
            raise DemoSetupError(
                f"{sid} in {where} runs model {info.model!r} with a window of "
                f"{info.context_window}, not {settings.model!r} with {settings.context_window}: "
                "use another --store"
            )


def _prepare_store(store: Path) -> None:
    """The store's directory, created when missing; DemoSetupError when the path cannot be one."""
    try:
        mode: int | None = store.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as error:  # a symlink loop, a file on the way, no permission
        raise DemoSetupError(f"--store {store}: {error.strerror or error}") from error
    if mode is not None and not stat.S_ISDIR(mode):
        raise DemoSetupError(f"--store {store} is not a directory")
    try:
        store.parent.mkdir(parents=True, exist_ok=True)
        private_dir(store)  # the store holds conversations: 0700, as the journal makes its own
    except OSError as error:
        raise DemoSetupError(f"--store {store}: {error.strerror or error}") from error


@dataclass(frozen=True)
class LiveRun:
    """What the host held when the run ended, before it stopped."""

    sids: list[str]
    #: how each turn of this run ended, per session
    outcomes: dict[str, list[TurnOutcome]]
    #: each session's state and next request, live: what the reopened store must replay to
    states: dict[str, SessionState]
    requests: dict[str, AssembledRequest]
    #: the sessions continued from an earlier run on the same store
    continued: int
    #: from the start of the run to the end of its last client
    seconds: float


def run(
    store: Path,
    sessions: int,
    turns: int,
    *,
    show: bool,
    plain: bool,
    setup: Setup | None = None,
    fsync: FsyncFn = os.fsync,
) -> dict[str, Any]:
    """Run the demo; returns the report (see `main` for its use).

    Raises `DemoSetupError` when the demo cannot start on `store`, a
    `CairnError` of the store (`StoreLocked`: another process writes it) or
    `OSError`, and `DemoStoreFailed` when the store failed during the run.
    `fsync` is the disk sync the store uses (a seam for tests of a failing disk).
    """
    setup = setup if setup is not None else scripted_setup()
    started = time.perf_counter()
    sids = [f"demo-{n}" for n in range(1, sessions + 1)]
    _prepare_store(store)
    live = _run_live(store, setup, sids, turns, show=show, plain=plain, started=started, fsync=fsync)
    reports = _replay_reports(store, setup, live, fsync=fsync)
    return summarize(
        setup,
        store,
        sessions,
        turns,
        reports,
        continued=live.continued,
        run_seconds=live.seconds,
        total_seconds=time.perf_counter() - started,
    )


def _run_live(
    store: Path,
    setup: Setup,
    sids: list[str],
    turns: int,
    *,
    show: bool,
    plain: bool,
    started: float,
    fsync: FsyncFn,
) -> LiveRun:
    """Every session's `turns` on one host, then the host stopped: every actor, then the store.

    Raises `DemoSetupError` when the store holds a session of another model,
    and `DemoStoreFailed` when the store failed during the run.
    """
    settings = setup.settings
    sessions = len(sids)
    spaces = store / "demo-workspaces"
    host = Host.open(
        store,
        settings=settings,
        tools=setup.tools if setup.tools is not None else WorkspaceTools(),
        config=HostConfig(max_live_sessions=max(sessions, 8)),
        provider_factory=setup.adapter_for,
        fsync=fsync,
    )
    try:
        firsts = _first_turns(host, sids, spaces, settings)
        lives = {sid: Live(of=turns) for sid in sids}
        _drive(host, setup, spaces, firsts, turns, lives, show=show, plain=plain, started=started)
        ran = time.perf_counter() - started
        failed = host.journal.failed
        states = {sid: host.state(sid) for sid in sids} if failed is None else {}
        requests = {sid: host.next_request(sid) for sid in sids} if failed is None else {}
    finally:
        host.close()  # stop: every actor, then the store
    outcomes = {sid: lives[sid].outcomes for sid in sids}
    if failed is not None:
        done = sum(outcome.ok for sid in sids for outcome in outcomes[sid])
        raise DemoStoreFailed(f"{failed}; {done} of {sessions * turns} turns completed before it")
    continued = sum(1 for sid in sids if firsts[sid] > 1)
    return LiveRun(
        sids=sids, outcomes=outcomes, states=states, requests=requests, continued=continued, seconds=ran
    )


def _first_turns(host: Host, sids: list[str], spaces: Path, settings: SessionSettings) -> dict[str, int]:
    """Each session's workspace made and its log checked; the number of its first turn this run.

    A demo continues where the log ends: turns already run keep their numbers.
    """
    for n, sid in enumerate(sids, 1):
        make_workspace(spaces / sid, n)
    _check_sessions(host, sids, settings)
    firsts: dict[str, int] = {}
    for sid in sids:
        summary = host.journal.session(sid)
        firsts[sid] = (summary.counts.get("turn-started", 0) if summary is not None else 0) + 1
    return firsts


def _drive(
    host: Host,
    setup: Setup,
    spaces: Path,
    firsts: dict[str, int],
    turns: int,
    lives: dict[str, Live],
    *,
    show: bool,
    plain: bool,
    started: float,
) -> None:
    """One client thread per session, all at once; on a terminal (`show`) the live view until they end."""
    lock = threading.Lock()
    threads = [
        threading.Thread(
            target=send_turns,
            name=f"demo-client-{sid}",
            args=(host, setup, sid, spaces / sid, firsts[sid], turns, live, lock, plain),
        )
        for sid, live in lives.items()
    ]
    for thread in threads:
        thread.start()
    if show:
        show_progress(threads, lives, lock, started)
    for thread in threads:
        thread.join()


def _replay_reports(store: Path, setup: Setup, live: LiveRun, *, fsync: FsyncFn) -> list[SessionReport]:
    """The store reopened: each session's report, and whether it replays to what it was live.

    Replayed means the same state and next request as live, and the same
    state again from a full replay of the log (no checkpoint).
    """
    settings = setup.settings
    reopened = Host.open(
        store,
        settings=settings,
        tools=setup.tools if setup.tools is not None else WorkspaceTools(),
        config=HostConfig(sweep=False),
        provider_factory=setup.adapter_for,
        fsync=fsync,
    )
    try:
        reports = []
        for sid in live.sids:
            report = session_report(reopened.journal, sid)
            report.replayed = (
                reopened.state(sid) == live.states[sid]
                and reopened.next_request(sid) == live.requests[sid]
                and reopened.journal.replay_full(sid) == live.states[sid]
            )
            outcomes = live.outcomes[sid]
            report.sent = len(outcomes)
            report.completed = sum(outcome.ok for outcome in outcomes)
            report.problems = [
                {
                    "turn": o.turn,
                    "status": o.status,
                    "phase": o.phase,
                    "error_class": o.error_class,
                    "error": o.error,
                    "reason": o.reason,
                }
                for o in outcomes
                if not o.ok
            ]
            reports.append(report)
    finally:
        reopened.close()
    return reports
