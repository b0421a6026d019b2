"""The host: one store, many sessions, each a session actor spawned by replay when needed.

Embedding cairn::

    from cairn import Host, WorkspaceTools

    with Host.open("./cairn-data", provider=my_adapter, tools=WorkspaceTools()) as host:
        turn = host.send("session-1", "fix the failing test", workspace="/repo")
        for item in turn.events():          # client-visible, live (never the hand-off)
            ...
        result = turn.result(timeout=60)    # TurnResult: completed / failed (phase) / rejected
        host.fork("session-1", "session-2") # history without the hidden hand-off (H6)
        host.compact("session-1")           # K4: a checkpoint, or None below 50 % of the window

Registry and passivation. The host keeps at most `max_live_sessions` session
actors alive. A session is *busy* while a turn, a compaction or a query it
was sent is unanswered; only idle sessions are passivated: the least
recently used one when a new session needs a slot (LRU), and any that stayed
idle longer than `idle_timeout_s` (a sweeper thread, or `passivate_idle()`).
Stopping is free: the state lives in the log, and the next message rebuilds
the actor by replay. When every slot is busy, a new session waits for one
(`HostBusy` after `slot_timeout_s`), so the cap is a hard bound.

Recovery. A session whose log ends in a turn that never finished (the
process died, or the actor crashed) gets `turn-failed` with phase
`interrupted` when it is next loaded; the host may simply send again. A
session actor that died is noticed on the next message to it and rebuilt.

Shutdown (`close`): no new work; session actors are stopped most recently
used first (each records an interrupted turn, then stops its compactor and
provider actors); turns still unresolved are failed; the store is closed
last. A host stops only its own actors, never `pykka.ActorRegistry.stop_all()`:
a process may run several hosts. A host that is never closed is closed at
interpreter exit, before Python waits for the (non-daemon) session threads.

Thread-safety: every method may be called from any thread.
"""

from __future__ import annotations

import bisect
import collections
import concurrent.futures
import contextlib
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal

import msgspec
import pykka

from cairn.actors.compactor.hooks import PreCompactionHook
from cairn.actors.compactor.service import CompactionConfig
from cairn.actors.errors import (
    HostBusy,
    HostClosed,
    HostError,
    HostTimeout,
    SessionCrashed,
    SessionExists,
    UnknownSession,
)
from cairn.actors.provider.base import Provider
from cairn.actors.provider.retry import RetryPolicy
from cairn.actors.provider.scripted import ScriptedProvider
from cairn.actors.session.actor import SessionActor
from cairn.actors.session.handoff import is_hidden_event
from cairn.actors.session.messages import Load, ManualCompact, Query, Send
from cairn.actors.session.request import AssembledRequest
from cairn.actors.session.runtime import Runtime
from cairn.actors.session.settings import SessionSettings
from cairn.actors.session.stream import Turn, TurnResult
from cairn.actors.tokens import load_encoding
from cairn.actors.tools import ToolExecutor
from cairn.events.codec import Record, validate_session_id
from cairn.events.errors import InputError
from cairn.events.kinds import CheckpointCommitted, EventBase, SessionStarted
from cairn.events.model import ImagePart, Part, TextPart
from cairn.events.state import SessionState
from cairn.store.errors import SeqConflict, StorageFailed
from cairn.store.journal import Journal
from cairn.store.segments import FsyncFn

log = logging.getLogger("cairn.host")

#: events per append when a fork copies a history
FORK_BATCH = 1_024


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def absolute_workspace(workspace: str | os.PathLike[str]) -> str:
    """A workspace as sessions record it: absolute (against the current directory) and normalized.

    Not the compactor's `breaker.normalize_workspace`, a lexical key that never reads the cwd.
    """
    return os.path.normpath(os.path.abspath(os.fspath(workspace)))


class _Entry:
    """One session's slot in the registry."""

    __slots__ = ("busy", "last_used", "ref", "sid", "state")

    def __init__(self, sid: str, now_ms: int) -> None:
        self.sid = sid
        self.ref: pykka.ActorRef[Any] | None = None
        self.state: Literal["starting", "live", "stopping"] = "starting"
        self.busy = 1
        self.last_used = now_ms



_parts_decoder = msgspec.json.Decoder(tuple[TextPart | ImagePart, ...])
_settings_decoder = msgspec.json.Decoder(SessionSettings)


def _user_content(message: object) -> str | tuple[Part, ...]:
    """A host's user message, checked: non-empty text, or text and image parts.

    Parts go through a JSON round trip (msgspec does not check field types
    when a Struct is built), so a `TextPart(123)` is refused here, before
    anything is written, not found later in an unreadable log line.
    """
    if isinstance(message, str):
        if not message:
            raise InputError("a message needs some text")
        _check_text(message, "the message")
        return message
    if isinstance(message, Mapping):
        raise InputError(
            "a message is text (a str) or a sequence of TextPart and ImagePart, not a "
            f"{type(message).__name__}: pass the text itself, e.g. send(session, 'hello')"
        )
    if isinstance(message, (bytes, bytearray, memoryview)):
        raise InputError(f"a message is text (a str), not {type(message).__name__}: decode it first")
    try:
        parts: tuple[object, ...] = tuple(message)  # type: ignore[arg-type]
    except TypeError:
        raise InputError(f"a message is text or a sequence of parts, not {type(message).__name__}") from None
    if not parts:
        raise InputError("a message needs at least one part")
    for index, part in enumerate(parts):
        if not isinstance(part, (TextPart, ImagePart)):
            raise InputError(
                f"part {index} is a {type(part).__name__}; a message takes TextPart and ImagePart"
            )
    try:
        checked: tuple[Part, ...] = _parts_decoder.decode(msgspec.json.encode(parts))
    except msgspec.ValidationError as exc:
        raise InputError(f"a malformed message part: {exc}") from None
    except UnicodeEncodeError:
        raise InputError("a message part has text that is not valid Unicode (a lone surrogate)") from None
    except (TypeError, ValueError, OverflowError) as exc:
        raise InputError(f"a message part cannot be recorded: {exc}") from None
    for index, part in enumerate(checked):
        if isinstance(part, ImagePart):
            if not part.data and not part.url:
                raise InputError(f"image part {index} has neither data nor a url")
            if not part.media_type.startswith("image/"):
                raise InputError(f"image part {index} has media type {part.media_type!r}")
    return checked


def _check_text(text: str, what: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(f"{what} is not valid Unicode: a lone surrogate at index {exc.start}") from None


def _workspace(workspace: object) -> str:
    """A workspace as sessions record it (absolute, normalized); a str path or an os.PathLike of one."""
    try:
        path = os.fspath(workspace)  # type: ignore[call-overload]
    except TypeError:
        kind = type(workspace).__name__
        raise InputError(f"a workspace is a path (str or os.PathLike), not {kind}") from None
    if not isinstance(path, str):
        raise InputError(f"a workspace is a str path, not {type(path).__name__}: decode it first")
    if not path or "\x00" in path:
        raise InputError(f"a workspace needs a path without NUL characters, not {path!r}")
    _check_text(path, "the workspace path")
    return absolute_workspace(path)


def _settings(settings: object) -> SessionSettings:
    """Settings for a new session, checked by a round trip (a Struct's types are not checked when built)."""
    if not isinstance(settings, SessionSettings):
        raise InputError(f"settings are a SessionSettings, not {type(settings).__name__}")
    try:
        return _settings_decoder.decode(msgspec.json.encode(settings))
    except msgspec.ValidationError as exc:
        raise InputError(f"malformed settings: {exc}") from None
    except (TypeError, ValueError, OverflowError) as exc:
        raise InputError(f"settings that cannot be recorded: {exc}") from None


class HostStats(msgspec.Struct, kw_only=True):
    """Counters of a host's registry (for tests, benchmarks and dashboards)."""

    spawned: int = 0
    passivated_lru: int = 0
    passivated_idle: int = 0
    rebuilt_after_crash: int = 0
    peak_live: int = 0


class Host:
    """Sessions of one store, each driven by a session actor (see the module doc)."""

    def __init__(
        self,
        journal: Journal,
        runtime: Runtime,
        *,
        settings: SessionSettings,
        max_live_sessions: int,
        idle_timeout_s: float,
        ask_timeout_s: float,
        slot_timeout_s: float,
        sweep: bool,
        owns_journal: bool,
    ) -> None:
        if max_live_sessions < 1:
            raise InputError(f"max_live_sessions must be at least 1, got {max_live_sessions}")
        self.journal = journal
        self._rt = runtime
        self._settings = settings
        self._max_live = max_live_sessions
        self._idle_ms = int(idle_timeout_s * 1000)
        self._ask_timeout = ask_timeout_s
        self._slot_timeout = slot_timeout_s
        self._owns_journal = owns_journal
        self._entries: collections.OrderedDict[str, _Entry] = collections.OrderedDict()
        self._cond = threading.Condition()
        self._outstanding: set[Turn] = set()
        self._closed = False
        self.stats = HostStats()
        self._stop_sweep = threading.Event()
        self._sweeper: threading.Thread | None = None
        if sweep and idle_timeout_s > 0:
            interval = max(0.05, min(idle_timeout_s / 4, 5.0))
            self._sweeper = threading.Thread(
                target=self._sweep, args=(interval,), name="cairn-host-sweeper", daemon=True
            )
            self._sweeper.start()
        _close_at_exit(self)

    @classmethod
    def open(
        cls,
        root: str | os.PathLike[str],
        *,
        provider: Provider | None = None,
        provider_factory: Callable[[str], Provider] | None = None,
        tools: ToolExecutor | None = None,
        settings: SessionSettings | None = None,
        max_live_sessions: int = 256,
        idle_timeout_s: float = 120.0,
        hook: PreCompactionHook | None = None,
        compaction: CompactionConfig | None = None,
        request_timeout_s: float | None = None,
        max_requests_per_turn: int = 64,
        turn_retries: int = 2,
        retry: RetryPolicy | None = None,
        retry_draw: Callable[[], float] | None = None,
        ask_timeout_s: float = 30.0,
        slot_timeout_s: float = 60.0,
        clock_ms: Callable[[], int] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        fsync: FsyncFn = os.fsync,
        journal: Journal | None = None,
        sweep: bool = True,
    ) -> Host:
        """Open (or create) the store at `root` and return a host on it.

        - `provider`: one adapter shared by every session (default: the
          offline `ScriptedProvider`); or `provider_factory(session_id)` for
          one adapter per session.
        - `tools`: the executor run for each tool call (see `actors.tools`);
          its `schemas` and `read_only` names fill in `settings` when those
          leave them empty.
        - `settings`: what new sessions start with (model, context window,
          output cap, system prompt, tool schemas).
        - `max_live_sessions`, `idle_timeout_s`: passivation (module doc).
        - `hook`: the pre-compaction hook (C2); `compaction`: its settings.
        - `turn_retries`: how often a turn's request is sent again after a
          transient provider error (rate limit, 5xx, timeout, reset) that
          came before any output, after 375 ms then 750 ms (as C5 waits for
          summaries), or after the server's `Retry-After` on a 429 or 503
          (with jitter; a hint over the cap fails the turn at once); 0 fails
          the turn at the first one. Each try is in the log: a
          `provider-error` (with the hint and the wait), then a `request`
          with the next attempt.
        - `retry`: those waits (`actors.provider.retry.RetryPolicy`: the
          schedule, the cap of 60 s on a server's hint, the jitter), for
          turns and summary calls alike; `retry_draw`: the jitter's random
          number in [0, 1) (default `random.random`; seed it in tests).
        - `clock_ms`, `sleep`, `fsync`: time, the retry sleep and the disk
          sync, injectable for tests (the clock stamps the log too).
        - `journal`: an already open journal to use instead (not closed by
          the host); `root` is then ignored.
        """
        clock = clock_ms if clock_ms is not None else _wall_ms
        if provider is not None and provider_factory is not None:
            raise InputError("pass provider or provider_factory, not both")
        if provider_factory is None:
            shared: Provider = provider if provider is not None else ScriptedProvider()

            def factory(sid: str) -> Provider:
                return shared

            provider_factory = factory
        base = settings if settings is not None else SessionSettings()
        if tools is not None:
            schemas = tuple(getattr(tools, "schemas", ()) or ())
            read_only = getattr(tools, "read_only", None)
            if not base.tool_schemas and schemas:
                base = msgspec.structs.replace(base, tool_schemas=schemas)
            if base.read_only_tools is None and read_only is not None:
                base = msgspec.structs.replace(base, read_only_tools=tuple(read_only))
        owns = journal is None
        if journal is None:
            journal = Journal.open(root, fsync=fsync, clock_ms=clock)
        runtime = Runtime(
            journal=journal,
            encoding=load_encoding(),  # once per process, before the first turn waits for it
            adapter_for=provider_factory,
            tools=tools,
            clock_ms=clock,
            sleep=sleep,
            hook=hook,
            compaction=compaction,
            request_timeout_s=request_timeout_s,
            max_requests_per_turn=max_requests_per_turn,
            turn_retries=max(0, turn_retries),
            retry=retry if retry is not None else RetryPolicy(),
            retry_draw=retry_draw if retry_draw is not None else random.random,
        )
        try:
            return cls(
                journal,
                runtime,
                settings=base,
                max_live_sessions=max_live_sessions,
                idle_timeout_s=idle_timeout_s,
                ask_timeout_s=ask_timeout_s,
                slot_timeout_s=slot_timeout_s,
                sweep=sweep,
                owns_journal=owns,
            )
        except BaseException:
            if owns:
                journal.close()
            raise

    # -- the public calls ----------------------------------------------------------------

    def send(
        self,
        session: str,
        text: str | Sequence[Part],
        *,
        workspace: str | os.PathLike[str] | None = None,
        settings: SessionSettings | None = None,
    ) -> Turn:
        """Send a user message; returns the handle of the turn it starts (or steers, mid-turn).

        The message is text, or a sequence of parts (`TextPart`, `ImagePart`:
        images for a multimodal model; one over 256 KiB is kept in the blob
        store and still sent to the model as an image). A new session needs
        `workspace` (and starts with `settings`, default the host's); for an
        existing one, `workspace` may be left out and must match when given.
        Problems the session finds (a wrong workspace, a store failure) come
        back in the handle's result as `rejected`; once the store has failed
        (a full disk, an I/O error), `send` raises `StorageFailed` at once. Arguments of the wrong
        kind (a dict for a message, bytes for a path, a malformed part or
        SessionSettings, text with lone surrogates) raise `InputError` here,
        before anything is written.
        """
        validate_session_id(session)
        content = _user_content(text)
        where = _workspace(workspace) if workspace is not None else None
        chosen = _settings(settings) if settings is not None else self._settings
        self._check_store()
        for _ in range(3):
            entry = self._acquire(session)
            turn = Turn(session, on_done=self._done_callback(entry))
            with self._cond:
                self._outstanding.add(turn)
            try:
                assert entry.ref is not None
                entry.ref.tell(Send(content, turn, workspace=where, settings=chosen))
            except pykka.ActorDeadError:
                with self._cond:
                    self._outstanding.discard(turn)
                self._release(entry)
                continue  # the next _acquire sees the dead actor and rebuilds it by replay
            return turn
        raise SessionCrashed(f"session {session} keeps failing to start")

    def compact(self, session: str, *, timeout: float | None = 600.0) -> Record | None:
        """K4: compact now with trigger `manual`; None below 50 % of the window.

        Waits for a running turn to end first. Raises `CompactionBlocked`
        when the pre-compaction hook refuses (C3), a store error when the
        checkpoint cannot be written, `HostTimeout` after `timeout` seconds.
        """
        validate_session_id(session)
        if self.journal.last_seq(session) == 0:
            raise UnknownSession(f"no session {session} in the store")
        future: concurrent.futures.Future[Record | None] = concurrent.futures.Future()
        entry = self._acquire(session)
        try:
            assert entry.ref is not None
            entry.ref.tell(ManualCompact(future))
            return future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            raise HostTimeout(f"session {session}: no compaction result within {timeout} s") from None
        except pykka.ActorDeadError:
            raise SessionCrashed(f"session {session} stopped before compacting; try again") from None
        finally:
            self._release(entry)

    def fork(self, source: str, target: str) -> int:
        """Copy `source`'s history into the new session `target`, without hidden events (H6).

        `target` starts with `source`'s settings and names it as its parent;
        checkpoints keep pointing at the right events (`through_seq` is
        renumbered past the dropped hand-offs). A turn of `source` in flight
        is copied as far as it is durable and marked interrupted when
        `target` is first loaded. Returns `target`'s last seq.
        """
        validate_session_id(source)
        validate_session_id(target)
        if source == target:
            raise InputError("a session cannot be forked onto itself")
        self._check_store()
        last = self.journal.last_seq(source)
        if last == 0:
            raise UnknownSession(f"no session {source} in the store")
        if self.journal.last_seq(target) != 0:
            raise SessionExists(f"session {target} already exists")
        self._evict(target)
        dropped: list[int] = []
        batch: list[EventBase] = []
        written = 0

        def flush() -> None:
            nonlocal written
            try:
                records = self.journal.append(target, batch, expected_seq=written)
            except SeqConflict:
                raise SessionExists(f"session {target} was written while it was being forked") from None
            written = records[-1].seq
            batch.clear()

        for record in self.journal.read(source, 1, last):
            event = record.event
            if is_hidden_event(event):
                dropped.append(record.seq)
                continue
            if isinstance(event, SessionStarted):
                event = msgspec.structs.replace(event, parent_session=source, parent_seq=last)
            elif isinstance(event, CheckpointCommitted):
                gone = bisect.bisect_right(dropped, event.through_seq)
                event = msgspec.structs.replace(event, through_seq=event.through_seq - gone)
            batch.append(event)
            if len(batch) >= FORK_BATCH:
                flush()
        if batch:
            flush()
        return written

    def state(self, session: str) -> SessionState:
        """The session's state as its actor holds it (loading it by replay if needed)."""
        return self._query(session, "state")  # type: ignore[no-any-return]

    def next_request(self, session: str) -> AssembledRequest:
        """What the session's next request would send now (nothing is recorded)."""
        return self._query(session, "next-request")  # type: ignore[no-any-return]

    def passivate_idle(self, now_ms: int | None = None) -> int:
        """Stop every session idle for longer than the idle timeout; returns how many."""
        now = now_ms if now_ms is not None else self._rt.clock_ms()
        with self._cond:
            victims = [
                entry
                for entry in self._entries.values()
                if entry.state == "live" and entry.busy == 0 and now - entry.last_used >= self._idle_ms
            ]
            for entry in victims:
                entry.state = "stopping"
            self.stats.passivated_idle += len(victims)
        for entry in victims:
            self._stop_entry(entry)
        return len(victims)

    @property
    def live_sessions(self) -> list[str]:
        """Sessions with a live actor, least recently used first."""
        with self._cond:
            return [sid for sid, entry in self._entries.items() if entry.state != "stopping"]

    def sessions(self) -> Iterator[str]:
        """Every session in the store, in id order."""
        for summary in self.journal.sessions():
            yield summary.sid

    def close(self) -> None:
        """Stop every session actor (most recently used first), then close the store. Idempotent."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        self._stop_sweep.set()
        if self._sweeper is not None:
            self._sweeper.join(timeout=10)
        while True:
            with self._cond:
                entries = [e for e in reversed(self._entries.values()) if e.state == "live"]
                for entry in entries:
                    entry.state = "stopping"
                starting = any(e.state == "starting" for e in self._entries.values())
            for entry in entries:
                self._stop_entry(entry)
            if not entries and not starting:
                break
            if not entries:
                with self._cond:
                    self._cond.wait(0.05)
        with self._cond:
            leftover = list(self._outstanding)
            self._outstanding.clear()
        closed = TurnResult(session="", status="failed", phase="interrupted", error_class="HostClosed",
                            error="the host was closed before the turn ended")
        for turn in leftover:
            turn._finish(msgspec.structs.replace(closed, session=turn.session))
        if self._owns_journal:
            self.journal.close()
        with _exit_hook_lock:
            _open_hosts.discard(self)

    def __enter__(self) -> Host:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- the registry ---------------------------------------------------------------------

    def _check_store(self) -> None:
        """`StorageFailed` once the store failed (a full disk, an I/O error): the host must be reopened.

        A new error for each call, caused by the OS error behind the journal's: raising the
        journal's one instance from every client thread would chain each caller's traceback
        onto the same object, and print them all with it.
        """
        failed = self.journal.failed
        if failed is not None:
            raise StorageFailed(str(failed)) from failed.__cause__

    def _live_count(self) -> int:
        return sum(1 for entry in self._entries.values() if entry.state != "stopping")

    def _wait(self, deadline: float, sid: str) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise HostBusy(
                f"no live-session slot for {sid} within {self._slot_timeout} s: "
                f"all {self._max_live} are busy"
            )
        self._cond.wait(remaining)

    def _acquire(self, sid: str) -> _Entry:
        """The live entry of `sid`, marked busy; spawned by replay (evicting LRU) when needed."""
        deadline = time.monotonic() + self._slot_timeout
        while True:
            victim: _Entry | None = None
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
                        entry.busy += 1
                        self._entries.move_to_end(sid)
                        return entry
                    del self._entries[sid]  # crashed: rebuilt below by replay
                    self.stats.rebuilt_after_crash += 1
                    log.warning("cairn: a session actor had died; rebuilding it from its log")
                if self._live_count() >= self._max_live:
                    victim = next(
                        (e for e in self._entries.values() if e.state == "live" and e.busy == 0), None
                    )
                    if victim is None:
                        self._wait(deadline, sid)
                        continue
                    victim.state = "stopping"
                    self.stats.passivated_lru += 1
                entry = _Entry(sid, self._rt.clock_ms())
                self._entries[sid] = entry
            if victim is not None:
                self._stop_entry(victim)
            try:
                ref = self._spawn(sid)
            except BaseException:
                with self._cond:
                    if self._entries.get(sid) is entry:
                        del self._entries[sid]
                    self._cond.notify_all()
                raise
            with self._cond:
                entry.ref = ref
                entry.state = "live"
                self.stats.spawned += 1
                self.stats.peak_live = max(self.stats.peak_live, self._live_count())
                self._cond.notify_all()
                closed = self._closed
            if closed:
                entry.busy -= 1
                raise HostClosed("the host was closed while the session started")
            return entry

    def _spawn(self, sid: str) -> pykka.ActorRef[Any]:
        ref = SessionActor.start(sid, self._rt)
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

    def _release(self, entry: _Entry) -> None:
        with self._cond:
            entry.busy -= 1
            entry.last_used = self._rt.clock_ms()
            self._cond.notify_all()

    def _done_callback(self, entry: _Entry) -> Callable[[Turn], None]:
        def done(turn: Turn) -> None:  # runs on the session's thread: never blocks on an actor
            with self._cond:
                self._outstanding.discard(turn)
            self._release(entry)

        return done

    def _stop_entry(self, entry: _Entry) -> None:
        """Stop an entry marked `stopping` (outside the lock), then drop it from the registry."""
        if entry.ref is not None:
            try:
                entry.ref.stop(block=True, timeout=self._rt.stop_timeout_s)
            except Exception as exc:
                log.warning("cairn: a session actor did not stop cleanly: %s", type(exc).__name__)
        with self._cond:
            if self._entries.get(entry.sid) is entry:
                del self._entries[entry.sid]
            self._cond.notify_all()

    def _evict(self, sid: str) -> None:
        """Stop `sid`'s actor if it is live and idle (a fork target must not have a stale one)."""
        with self._cond:
            entry = self._entries.get(sid)
            if entry is None:
                return
            if entry.state != "live" or entry.busy:
                raise SessionExists(f"session {sid} is in use")
            entry.state = "stopping"
        self._stop_entry(entry)

    def _query(self, sid: str, what: Literal["state", "next-request"]) -> Any:
        validate_session_id(sid)
        entry = self._acquire(sid)
        try:
            assert entry.ref is not None
            return entry.ref.ask(Query(what), timeout=self._ask_timeout)
        except pykka.Timeout:
            raise HostTimeout(f"session {sid} did not answer within {self._ask_timeout} s") from None
        finally:
            self._release(entry)

    def _sweep(self, interval: float) -> None:
        while not self._stop_sweep.wait(interval):
            try:
                self.passivate_idle()
            except Exception as exc:  # the sweeper must outlive one bad round
                log.warning("cairn: idle passivation failed: %s", type(exc).__name__)


# --- closing forgotten hosts at exit ----------------------------------------------------------

#: hosts open in this process. Strong references: a host its embedder dropped without closing
#: still has live (non-daemon) session threads, and must still be closed at exit, or the
#: interpreter waits for those threads forever. `close` takes a host out.
_open_hosts: set[Host] = set()
_exit_hook_lock = threading.Lock()
_exit_hook_installed = False


def _close_all() -> None:
    with _exit_hook_lock:
        hosts = list(_open_hosts)
    for host in hosts:
        with contextlib.suppress(Exception):
            host.close()


def _close_at_exit(host: Host) -> None:
    """Close `host` at interpreter exit *before* Python joins non-daemon threads (session actors)."""
    global _exit_hook_installed
    with _exit_hook_lock:
        _open_hosts.add(host)
        if _exit_hook_installed:
            return
        register = getattr(threading, "_register_atexit", None)
        if register is not None:
            with contextlib.suppress(RuntimeError):
                register(_close_all)
        _exit_hook_installed = True


__all__ = ["Host", "HostStats"]
