"""The host's API: one store, many sessions, each a session actor spawned by replay when needed.

Embedding cairn::

    from cairn import Host, HostConfig, WorkspaceTools

    with Host.open("./cairn-data", provider=my_adapter, tools=WorkspaceTools()) as host:
        turn = host.send("session-1", "fix the failing test", workspace="/repo")
        for item in turn.events():          # client-visible, live (never the hand-off)
            ...
        result = turn.result(timeout=60)    # TurnResult: completed / failed (phase) / rejected
        host.fork("session-1", "session-2") # history without the hidden hand-off (H6)
        host.compact("session-1")           # K4: a CompactResult: a checkpoint, or why none

    Host.open(root, config=HostConfig(max_live_sessions=64, turn_retries=0))  # tunables

Registry and passivation (`registry`): at most `max_live_sessions` session
actors are alive; idle ones are stopped (LRU, idle timeout) and rebuilt by
replay on their next message. Its bookkeeping is O(1) per spawn and
passivation, however many sessions are live.

Recovery. A session whose log ends in a turn that never finished (the
process died, or the actor crashed) gets `turn-failed` with phase
`interrupted` when it is next loaded; the host may simply send again. A
session actor that died is noticed on the next message to it and rebuilt.

Shutdown (`close`): no new work; session actors are stopped most recently
used first (each records an interrupted turn, then stops its compactor and
provider actors); turns still unresolved are failed; the store is closed
last. A host stops only its own actors, never `pykka.ActorRegistry.stop_all()`:
a process may run several hosts. A host that is never closed is closed at
interpreter exit, before Python joins or abandons the session threads
(`exit_hook`).

Thread-safety: every method may be called from any thread.
"""

# long: the public API, one method per operation, each docstring its contract (the work is elsewhere)

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, Literal

import msgspec
import pykka

from cairn.actors.compactor.hooks import PreCompactionHook
from cairn.actors.errors import HostClosed, HostTimeout, SessionCrashed, UnknownSession
from cairn.actors.host import exit_hook
from cairn.actors.host.config import HostConfig
from cairn.actors.host.fork import copy_history, source_to_fork
from cairn.actors.host.inputs import (
    check_budget,
    checked_key,
    checked_settings,
    checked_workspace,
    user_content,
)
from cairn.actors.host.interrupted import InterruptedTurn, interrupted_turns
from cairn.actors.host.opening import (
    adapter_for,
    default_settings,
    fixed_tokens,
    runtime_for,
    wall_ms,
    with_tools,
)
from cairn.actors.host.registry import Entry, HostStats, Registry
from cairn.actors.host.transcript import TranscriptPage, read_page
from cairn.actors.host.turn_control import (
    canceller,
    check_mid_turn,
    check_turn_id,
    resolution,
    tell_and_wait,
)
from cairn.actors.provider.base import Provider
from cairn.actors.session.machine import MidTurn
from cairn.actors.session.manual import CompactResult
from cairn.actors.session.messages import ContinueTurn, DismissTurn, ManualCompact, Query, Send
from cairn.actors.session.request import AssembledRequest
from cairn.actors.session.runtime import Runtime
from cairn.actors.session.settings import SessionSettings
from cairn.actors.session.stream import Turn, TurnResult
from cairn.actors.tokens import load_encoding
from cairn.actors.tools import ToolExecutor, ToolOutcome
from cairn.events.codec import Record, validate_session_id
from cairn.events.errors import InputError
from cairn.events.model import Part, ToolCall
from cairn.events.state import SessionState
from cairn.store.backend import JournalBackend
from cairn.store.errors import StorageFailed
from cairn.store.journal import Journal
from cairn.store.segments import FsyncFn


class Host:
    """Sessions of one store, each driven by a session actor (see the module doc)."""

    def __init__(
        self,
        journal: JournalBackend,
        runtime: Runtime,
        *,
        settings: SessionSettings,
        config: HostConfig,
        owns_journal: bool,
        given: SessionSettings | None = None,
    ) -> None:
        self.journal = journal
        self._rt = runtime
        self._settings = settings
        #: the settings as the host was given them, before the executor's schemas filled them in
        self._given = given if given is not None else settings
        self._budget_checked = settings  # the last settings `check_budget` passed (P2)
        self._ask_timeout = config.ask_timeout_s
        self._owns_journal = owns_journal
        self._registry = Registry(runtime, config)
        self.stats: HostStats = self._registry.stats
        self._lock = threading.Lock()
        self._outstanding: set[Turn] = set()
        exit_hook.close_at_exit(self)

    @classmethod
    def open(
        cls,
        root: str | os.PathLike[str],
        *,
        config: HostConfig | None = None,
        settings: SessionSettings | None = None,
        provider: Provider | None = None,
        provider_factory: Callable[[str], Provider] | None = None,
        tools: ToolExecutor | None = None,
        hook: PreCompactionHook | None = None,
        journal: JournalBackend | None = None,
        clock_ms: Callable[[], int] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        fsync: FsyncFn = os.fsync,
        retry_draw: Callable[[], float] | None = None,
    ) -> Host:
        # long: the signature and docstring give each of its twelve arguments; the body is short
        """Open (or create) the store at `root` and return a host on it.

        `config` is how the host runs (`HostConfig`: limits, timeouts,
        retries, compaction), `settings` what new sessions start with (model,
        window, output cap, system prompt, tool schemas; without them, the
        model, window and cap the provider is configured with, where it has
        them, as `OpenAIProvider.from_env()` has `CAIRN_MODEL`). Settings whose
        window is not larger than the output reserve plus the system prompt
        and tool schemas raise `NoInputBudget` before anything is opened:
        they would leave the budget unknown, and every session would run
        without a hand-off or compaction (`context_window=None` says so on
        purpose, and is accepted). The rest are live objects, which no
        settings object holds:

        - `provider`: one adapter for every session (default: the offline
          `ScriptedProvider`), or `provider_factory(session_id)`: one each.
        - `tools`: the executor of tool calls (`actors.tools`); its `schemas`
          and `read_only` names fill in `settings` where those are empty.
        - `hook`: the pre-compaction hook (C2); `journal`: an open journal to
          use instead of opening `root` (the host does not close it).
        - `clock_ms`, `sleep`, `fsync`, `retry_draw`: time (it stamps the
          log), the retry sleep, the disk sync and the jitter's draw in
          [0, 1), injectable for tests.
        """
        config = config if config is not None else HostConfig()
        clock = clock_ms if clock_ms is not None else wall_ms
        adapters = adapter_for(provider, provider_factory)
        given = settings if settings is not None else default_settings(provider)
        base = with_tools(given, tools)
        encoding = load_encoding()  # once per process, before the first turn waits for it
        check_budget(base, fixed_tokens(base, encoding))  # before anything is opened or written
        owns = journal is None
        if journal is None:
            journal = Journal.open(root, fsync=fsync, clock_ms=clock)
        runtime = runtime_for(
            journal,
            config,
            encoding=encoding,
            adapter_for=adapters,
            tools=tools,
            clock=clock,
            sleep=sleep,
            hook=hook,
            retry_draw=retry_draw,
        )
        try:
            return cls(journal, runtime, settings=base, config=config, owns_journal=owns, given=given)
        except BaseException:
            assert runtime.tool_runner is not None
            runtime.tool_runner.close()
            if owns:
                journal.close()
            raise

    def add_record_listener(self, listener: Callable[[str, list[Record]], None]) -> Callable[[], None]:
        """Call `listener(session, records)` after every append of every session, once the journal
        acknowledged it (hidden records too), on the session's thread: it must return at once and
        never block. Returns the function that removes it. For followers of a session's log (the
        HTTP API's event streams) that must hear of what no turn handle of theirs carries."""
        self._rt.record_listeners.append(listener)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                self._rt.record_listeners.remove(listener)

        return remove

    @property
    def settings(self) -> SessionSettings:
        """What a new session starts with when `send` names no settings (tool schemas filled in)."""
        return self._settings

    # -- the public calls ----------------------------------------------------------------

    def send(
        self,
        session: str,
        text: str | Sequence[Part],
        *,
        workspace: str | os.PathLike[str] | None = None,
        settings: SessionSettings | None = None,
        idempotency_key: str | None = None,
        mid_turn: MidTurn = "steer",
    ) -> Turn:
        """Send a user message; returns the handle of the turn it starts (or steers, mid-turn).

        The message is text, or a sequence of parts (`TextPart`, `ImagePart`:
        images for a multimodal model; one over 256 KiB is kept in the blob
        store and still sent to the model as an image). A new session needs
        `workspace` (and starts with `settings`, default the host's); for an
        existing one, `workspace` may be left out and must match when given.
        Problems the session finds (a wrong workspace, a store failure) come
        back in the handle's result as `rejected`; once the store has failed
        (a full disk, an I/O error), `send` raises `StorageFailed` at once.
        Arguments of the wrong kind (a dict for a message, bytes for a path,
        a malformed part or SessionSettings, text with lone surrogates) raise
        `InputError` here, before anything is written.

        `idempotency_key` (1..256 printable chars) makes a resend safe: the
        session records it with the message, and a later send with the same
        key records and runs nothing. While that turn runs, the new handle
        joins it (its items so far, then the rest); once it has ended, the
        handle is answered from the log: the turn's records and its result
        (`provider_seconds` 0). The same key with other content is
        `rejected`, error class `IdempotencyKeyReused`. Keys are per session.

        `mid_turn` says what the message does when it arrives while a turn of
        the session runs: `steer` (the default) joins that turn, recorded
        before its next request; `queue` waits for its end and starts the
        next turn; `reject` is refused (`rejected`, error class
        `TurnRunning`), nothing recorded; `interrupt` cancels the running
        turn (`turn.cancel()`) and starts the next. `turn.cancel()` stops the
        turn the handle follows, or withdraws the message while it waits.
        """
        # long: its docstring documents every argument; the body is short
        validate_session_id(session)
        check_mid_turn(mid_turn)
        content = user_content(text)
        key = checked_key(idempotency_key) if idempotency_key is not None else None
        where = checked_workspace(workspace) if workspace is not None else None
        chosen = self._new_session_settings(settings)
        self._check_store()
        return self._tell_turn(
            session,
            lambda turn: Send(content, turn, workspace=where, settings=chosen, key=key, mid_turn=mid_turn),
        )

    def continue_turn(self, session: str, turn_id: str) -> Turn:
        """Continue the session's interrupted turn `turn_id` (as `interrupted_turns()` lists it).

        A new turn on the same user message: what the interrupted one recorded
        stays (tool results are not run again; calls it left open have an error
        result saying their outcome is unknown). Its `turn-started` names the
        turn it `continues`; the session is then no longer listed. `rejected`
        with error class `NotInterrupted` when that is not the session's
        interrupted turn, `TurnRunning` when a turn runs.
        """
        validate_session_id(session)
        check_turn_id(turn_id)
        self._check_store()
        return self._tell_turn(session, lambda turn: ContinueTurn(turn_id, turn))

    def dismiss_interrupted(self, session: str, turn_id: str, reason: str = "") -> None:
        """Record that the interrupted turn `turn_id` will not be continued (`turn-dismissed`): it is
        no longer listed. `NotInterrupted` when it is not the session's interrupted turn."""
        validate_session_id(session)
        check_turn_id(turn_id)
        if not isinstance(reason, str):
            raise InputError(f"a reason is text, not {type(reason).__name__}")
        self._check_store()
        entry = self._registry.acquire(session)
        try:
            tell_and_wait(entry, session, DismissTurn(turn_id, reason, concurrent.futures.Future()), 30.0)
        finally:
            self._registry.release(entry)

    def _tell_turn(self, session: str, message_for: Callable[[Turn], Send | ContinueTurn]) -> Turn:
        """Tell the session the message that starts a turn, with a new handle; the handle."""
        for _ in range(3):
            entry = self._registry.acquire(session)
            turn = Turn(session, on_done=self._done_callback(entry), on_cancel=canceller(entry))
            with self._lock:
                self._outstanding.add(turn)
            try:
                assert entry.ref is not None
                entry.ref.tell(message_for(turn))
            except pykka.ActorDeadError:
                with self._lock:
                    self._outstanding.discard(turn)
                self._registry.release(entry)
                continue  # the next acquire sees the dead actor and rebuilds it by replay
            return turn
        raise SessionCrashed(f"session {session} keeps failing to start")

    def compact(self, session: str, *, timeout: float | None = 600.0) -> CompactResult:
        """K4: compact now with trigger `manual`; the answer says whether it did, and why not.

        A `CompactResult`: `compacted` and the checkpoint's `record`, or
        `reason` `below-threshold` (the projection is under half the window)
        or `window-unknown`, with the projection and the threshold it was
        compared with. Truthy exactly when it compacted. Waits for a running
        turn to end first. Raises `CompactionBlocked` when the
        pre-compaction hook refuses (C3), a store error when the checkpoint
        cannot be written, `HostTimeout` after `timeout` seconds.
        """
        future = self.compact_future(session)
        try:
            return future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            raise HostTimeout(f"session {session}: no compaction result within {timeout} s") from None

    def compact_future(self, session: str) -> concurrent.futures.Future[CompactResult]:
        """`compact`, without waiting: the future of its answer (or its error), for `AsyncHost`.

        Argument and store errors raise here; the session's answer, or its
        error, goes to the future, set from the session's thread.
        """
        validate_session_id(session)
        self._check_open()
        if self.journal.last_seq(session) == 0:
            raise UnknownSession(f"no session {session} in the store")
        future: concurrent.futures.Future[CompactResult] = concurrent.futures.Future()
        entry = self._registry.acquire(session)
        future.add_done_callback(lambda _: self._registry.release(entry))
        try:
            assert entry.ref is not None
            entry.ref.tell(ManualCompact(future))
        except pykka.ActorDeadError:
            crashed = SessionCrashed(f"session {session} stopped before compacting; try again")
            future.set_exception(crashed)
        except BaseException:
            future.cancel()  # gives the entry back
            raise
        return future

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
        self._check_open()
        self._check_store()
        last = source_to_fork(self.journal, source, target)
        self._registry.evict(target)
        return copy_history(self.journal, source, target, last)

    def stop_session(self, session: str) -> bool:
        """Stop the session's actor now, mid-turn too; False when it had none live.

        A turn it runs ends `failed`, phase `interrupted` (recorded when the
        store allows); the next message rebuilds the session by replay. For a
        cluster host that lost the session's lease (`actors.cluster`).
        """
        validate_session_id(session)
        return self._registry.stop(session)

    def state(self, session: str) -> SessionState:
        """The session's state as its actor holds it (loading it by replay if needed).

        A session the store does not hold yet gives the empty state
        (`info` None, `last_seq` 0) and, like a session loaded by replay,
        takes a live-session slot until it is passivated; nothing is written.
        """
        return self._query(session, "state")  # type: ignore[no-any-return]

    def next_request(self, session: str) -> AssembledRequest:
        """What the session's next request would send now (nothing is recorded)."""
        return self._query(session, "next-request")  # type: ignore[no-any-return]

    def waiting_tools(self, session: str) -> tuple[ToolCall, ...]:
        """The calls of `session`'s running turn that wait for `resolve_tool` (deferred: `Deferred`)."""
        return self._query(session, "waiting-tools")  # type: ignore[no-any-return]

    def resolve_tool(
        self, session: str, call_id: str, outcome: ToolOutcome, *, timeout: float | None = 30.0
    ) -> None:
        """Post the result of a call whose executor returned `Deferred` (a client-run tool, an
        approval pause); the turn goes on with it, recorded as the call's `tool-result`.

        Returns once the session took it. `ToolNotWaiting` when no such call waits (unknown,
        answered, timed out), `InputError` for a malformed outcome: both change nothing.
        """
        validate_session_id(session)
        reply = resolution(session, call_id, outcome)  # InputError before anything is sent
        entry = self._registry.acquire(session)
        try:
            tell_and_wait(entry, session, reply, timeout)
        finally:
            self._registry.release(entry)

    def passivate_idle(self, now_ms: int | None = None) -> int:
        """Stop every session idle for longer than the idle timeout; returns how many."""
        return self._registry.passivate_idle(now_ms)

    @property
    def live_sessions(self) -> list[str]:
        """Sessions with a live actor, least recently used first."""
        return self._registry.live_sessions

    def sessions(self) -> Iterator[str]:
        """Every session in the store, in id order (`HostClosed` once the host is closed)."""
        self._check_open()
        return (summary.sid for summary in self.journal.sessions())

    def interrupted_turns(self) -> list[InterruptedTurn]:
        """The turns that never finished, one per session at most, with the user message to send again.

        After a restart: each session whose last turn was interrupted (the
        process died, or the session was stopped mid-turn), in session id
        order; `text` is the message that started it (`InterruptedTurn`).
        Derived from the log alone (`interrupted.interrupted_turn`), reading
        every session's events: a start-up call, not a per-turn one. A turn
        this host is running now is left out. One stays listed until it is
        continued (`continue_turn`), dismissed (`dismiss_interrupted`), or
        another turn starts. A session that cannot be read (a corrupt line) is
        skipped, with a warning on the `cairn.host` logger.
        """
        self._check_open()
        return interrupted_turns(self.journal, set(self._registry.live_sessions))

    def transcript(
        self, session: str, *, after: int = 0, limit: int = 100, images: bool = False
    ) -> TranscriptPage:
        """A page of what the session's user saw, from the log: up to `limit` (1..1000) entries after `after`.

        Each a `TranscriptEntry` (seq, time, turn, a `Shown*` view); `next_after` and `more` page on;
        images by kind and size unless `images`. Bad arguments raise `InputError`, an unknown session
        `UnknownSession`, before anything is read; nothing is written (`actors/host/transcript.py`).
        """
        self._check_open()
        return read_page(self.journal, session, after=after, limit=limit, images=images)

    def close(self) -> None:
        """Stop every session actor (all at once: `HostConfig.stop_timeout_s` bounds the wait for them
        together), then close the store. Idempotent."""
        if not self._registry.close():
            return
        with self._lock:
            leftover = list(self._outstanding)
            self._outstanding.clear()
        closed = TurnResult(
            session="",
            status="failed",
            phase="interrupted",
            error_class="HostClosed",
            error="the host was closed before the turn ended",
        )
        for turn in leftover:
            turn._finish(msgspec.structs.replace(closed, session=turn.session))
        if self._rt.tool_runner is not None:
            self._rt.tool_runner.close()
        if self._owns_journal:
            self.journal.close()
        exit_hook.closed(self)

    def __enter__(self) -> Host:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- inside -------------------------------------------------------------------------------

    def _new_session_settings(self, given: object) -> SessionSettings:
        """What a new session would start with: `given` (checked) or the host's settings, empty tool
        schemas filled from the executor as it is now (an MCP server may have started, or changed its
        tools, since the host opened), checked for an input budget (P2) when they changed."""
        base = checked_settings(given) if given is not None else self._given
        chosen = with_tools(base, self._rt.tools)
        if chosen != self._budget_checked:
            check_budget(chosen, fixed_tokens(chosen, self._rt.encoding))
            self._budget_checked = chosen
        return chosen

    def _check_open(self) -> None:
        """`HostClosed` once `close` ran (the store is closed with it): for calls that read the store
        without a session actor, which would otherwise meet the closed index's own error."""
        if self._registry.closed:
            raise HostClosed("the host is closed")

    def _check_store(self) -> None:
        """`StorageFailed` once the store failed (a full disk, an I/O error): the host must be reopened.

        A new error for each call, caused by the OS error behind the journal's: raising the
        journal's one instance from every client thread would chain each caller's traceback
        onto the same object, and print them all with it.
        """
        failed = self.journal.failed
        if failed is not None:
            raise StorageFailed(str(failed)) from failed.__cause__

    def _done_callback(self, entry: Entry) -> Callable[[Turn], None]:
        def done(turn: Turn) -> None:  # runs on the session's thread: never blocks on an actor
            with self._lock:
                self._outstanding.discard(turn)
            self._registry.release(entry)

        return done

    def _query(self, sid: str, what: Literal["state", "next-request", "waiting-tools"]) -> Any:
        validate_session_id(sid)
        entry = self._registry.acquire(sid)
        try:
            assert entry.ref is not None
            return entry.ref.ask(Query(what), timeout=self._ask_timeout)
        except pykka.Timeout:
            raise HostTimeout(f"session {sid} did not answer within {self._ask_timeout} s") from None
        finally:
            self._registry.release(entry)
