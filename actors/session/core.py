"""The session actor's base: its state, persisting and applying, and how a turn ends.

The session actor is one pykka actor, written in five layers of one class
chain, each a module, each layer using only itself and the layers below
(three hooks are declared here: `_carry_out`, the actor's, and `_resume`
and `_prepare`, the turn loop's):

    SessionCore      (core.py)       state, load and replay, persist then apply, ending a turn
    Compacting       (compacting.py) compaction: L1 step 4, reactive (R3), manual (K4)
    Admitting        (admission.py)  who is let in: the workspace rule, idempotency keys
    TurnLoop         (turn_loop.py)  starting, steering, each request, the provider's answer, tools
    SessionActor     (actor.py)      lifecycle, messages as the machine's inputs, its effects, crashes

One class, because it is one actor: one thread and one inbox own every
field; the layers only split its code at its seams. Only the actor's own
thread runs any of it. What the actor waits for is its mode (`machine`,
pure): every message is an input of `machine.step`, and `_advance` carries
out the effects it returns.

Persist, then apply: `_persist` appends, waits for the acknowledgement,
folds the stored records with the `evolve` replay uses, and only then
publishes them to the turn's handles (H6: never a hidden one). A journal
error leaves memory as it was.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import logging
import time
from collections.abc import Sequence
from typing import Any, Literal, TypeVar

import pykka

from cairn.actors.errors import SessionStopped, describe_exception
from cairn.actors.provider.actor import ProviderActor
from cairn.actors.provider.base import Provider
from cairn.actors.session.counts import with_counts
from cairn.actors.session.deferred import DeferredWait, deferred_wait
from cairn.actors.session.handoff import is_hidden_event
from cairn.actors.session.idempotency import KeyedMessage
from cairn.actors.session.inflight import PendingCompaction, TurnRun
from cairn.actors.session.machine import AwaitingTools, Effect, Happened, Idle, Mode, Stopped, TurnEnded, step
from cairn.actors.session.messages import ManualCompact, Send
from cairn.actors.session.preparing import L1Done
from cairn.actors.session.request import assemble
from cairn.actors.session.runtime import Runtime
from cairn.actors.session.stream import TurnResult, TurnStatus
from cairn.actors.session.tracker import prepare
from cairn.actors.session.turn import cancel_events, failure_events, interrupted_events
from cairn.actors.session.view import HistoryView
from cairn.actors.tokens import TokenCounter
from cairn.events.codec import Record
from cairn.events.errors import CairnError
from cairn.events.kinds import EventBase, FailedPhase
from cairn.events.state import SessionState, replay
from cairn.store.errors import AppendTimeout, SeqConflict

log = logging.getLogger("cairn.session")

#: how often `_settle` looks at the log for an append that timed out
SETTLE_POLL_S = 0.02


class SessionCore(pykka.ThreadingActor):
    """The state of one session and its persistence (see the module doc); not started on its own."""

    use_daemon_thread = False  # on_stop records an interrupted turn and stops the children

    def __init__(self, sid: str, runtime: Runtime) -> None:
        super().__init__()
        self._sid = sid
        self._rt = runtime
        self._journal = runtime.journal
        self._counter = TokenCounter(runtime.encoding)
        self._view = HistoryView(self._counter)
        self._state = SessionState(sid=sid)
        self._loaded = False
        self._adapter: Provider | None = None
        self._provider: pykka.ActorRef[Any] | None = None
        self._compactor: pykka.ActorRef[Any] | None = None
        #: what the actor waits for (`machine`): changed only by `_advance`
        self._mode: Mode = Idle()
        self._run: TurnRun | None = None
        self._compaction: PendingCompaction | None = None
        self._sends: list[Send] = []
        #: the idempotency keys in the log and their turns (None: not read yet; `idempotency`)
        self._keys: dict[str, KeyedMessage] | None = None
        #: an append whose outcome is unknown (`AppendTimeout`): the head it was framed on and its
        #: event count; read back from the log before anything else is written (`_settle`)
        self._unsettled: tuple[int, int] | None = None
        self._manual: list[ManualCompact] = []
        self._jobs = itertools.count(1)

    # -- the state machine, and the hooks of the turn loop -------------------------------------

    def _advance(self, happened: Happened, cause: object = None) -> None:
        """One move of the machine (`machine.step`), then its effects in order.

        `cause` is the message that made it happen, for the effects that need
        its content. An effect that ends the turn (a failed append) stops the
        ones after it: they belonged to the turn that ended.
        """
        self._mode, effects = step(self._mode, happened)
        for effect in effects:
            if not self._carry_out(effect, cause):
                return

    def _carry_out(self, effect: Effect, cause: object) -> bool:
        """Carry out one effect (`SessionActor._carry_out`); False when it ended the turn."""
        raise NotImplementedError

    def _resume(self) -> None:
        """Idle again: start what waited (`TurnLoop._resume`)."""
        raise NotImplementedError

    def _prepare(self, done: L1Done) -> None:
        """L1 after the stages `done`, then the turn's next request (`TurnLoop._prepare`)."""
        raise NotImplementedError

    # -- loading -------------------------------------------------------------------------------------

    def _load(self) -> int:
        """Replay from the log; owe the log an `interrupted` end for a turn that never ended.

        Also starts the provider actor, here rather than in `on_start`, so a
        failure reaches the host that asked instead of silently stopping us.
        """
        if self._provider is None:
            self._adapter = self._rt.adapter_for(self._sid)
            self._provider = ProviderActor.start(self._adapter)
        state = self._journal.load(self._sid)
        self._keys = None  # read again from the log when a keyed message needs them
        owed = interrupted_events(state, "the turn never finished: the process stopped or crashed")
        wait = self._waiting_turn(state) if owed else None
        if wait is not None:
            owed = []  # not interrupted: it waits for a result from outside, resumed below
        if owed:
            records = self._journal.append(
                self._sid, owed, expected_seq=state.last_seq, timeout=self._rt.append_timeout_s
            )
            state = replay(records, state)
        self._state = state
        prepare(state, self._view)  # the first request pays no more than any other (see prepare)
        self._loaded = True
        if wait is not None:
            self._resume_wait(wait)
        return state.last_seq

    def _waiting_turn(self, state: SessionState) -> DeferredWait | None:
        """The log's open turn if it waits for a deferred result and this actor can resume it now
        (nothing else in flight), else None (then it is marked interrupted, as before)."""
        if state.open_turn is None or self._run is not None or not isinstance(self._mode, Idle):
            return None
        return deferred_wait(self._journal.read(self._sid, state.open_turn.started_seq))

    def _resume_wait(self, wait: DeferredWait) -> None:
        """Resume the wait of the log's open turn (`TurnLoop._resume_wait`)."""
        raise NotImplementedError

    def _settle(self) -> None:
        """Learn what became of an append that timed out, before writing anything else.

        It may still land (a stalled disk, a frozen node): framed on the head
        this actor had, so writing on that head now would be refused as if
        another writer had taken the session. Wait, at most the append
        timeout, for the log to hold it (its head moved by its events), then
        take the log's word either way (`_load`: a turn it left open is
        marked interrupted). Raises the journal's error when the log cannot
        be read; the next message tries again.
        """
        if self._unsettled is None:
            return
        head, count = self._unsettled
        deadline = time.monotonic() + self._rt.append_timeout_s
        while self._journal.last_seq(self._sid) < head + count and time.monotonic() < deadline:
            time.sleep(SETTLE_POLL_S)  # nothing to wait on: the append's caller gave up on it
        self._unsettled = None
        self._load()

    def _query(self, what: Literal["state", "next-request", "waiting-tools"]) -> Any:
        """Answer a `Query`: the state, the request it would send now (nothing is recorded), or the
        deferred calls waiting for `Host.resolve_tool`."""
        if what == "state":
            return self._state
        if what == "waiting-tools":
            mode = self._mode
            waiting = isinstance(mode, AwaitingTools) and mode.deferred
            return (mode.calls[mode.answered],) if isinstance(mode, AwaitingTools) and waiting else ()
        return assemble(self._state, self._view)

    # -- persisting ---------------------------------------------------------------------------

    def _persist(self, events: Sequence[EventBase]) -> list[Record]:
        """Append, wait for the acknowledgement, then apply and publish (persist, then apply)."""
        # so a replay needs no recount
        events = with_counts(events, self._counter, first_seq=self._state.last_seq + 1)
        if self._unsettled is not None:  # not where a turn starts (`_settle` ran there): fail safe
            raise AppendTimeout(f"session {self._sid}: an earlier append's outcome is still unknown")
        try:
            records = self._journal.append(
                self._sid, events, expected_seq=self._state.last_seq, timeout=self._rt.append_timeout_s
            )
        except SeqConflict:
            # someone else wrote this session: take the log's word for it before failing
            self._state = self._journal.load(self._sid)
            raise
        except AppendTimeout:
            self._unsettled = (self._state.last_seq, len(events))
            raise
        self._state = replay(records, self._state)
        run = self._run
        if run is not None:
            for record in records:
                if not is_hidden_event(record.event):  # H6: never in the client stream
                    for handle in run.handles:
                        handle._publish(record)
        for listener in self._rt.record_listeners:
            try:
                listener(self._sid, records)
            except Exception as exc:  # a host's listener must not fail the session
                log.warning("cairn: a record listener failed: %s", describe_exception(exc))
        return records

    def _try_persist(self, events: Sequence[EventBase], phase: FailedPhase) -> bool:
        """Persist, or fail the turn in `phase` when the journal refuses (memory unchanged)."""
        try:
            self._persist(events)
        except CairnError as exc:
            self._fail(phase, type(exc).__name__, str(exc))
            return False
        return True

    # -- ending ------------------------------------------------------------------------------------

    def _result(
        self,
        status: TurnStatus,
        phase: FailedPhase | Literal[""] | None,
        *,
        error_class: str = "",
        error: str = "",
        run: TurnRun | None = None,
    ) -> TurnResult:
        return TurnResult(
            session=self._sid,
            status=status,
            turn_id=run.turn_id if run is not None else "",
            phase=phase or None,
            error_class=error_class,
            error=error,
            requests=run.requests if run is not None else 0,
            text=run.text if run is not None else "",
            last_seq=self._state.last_seq,
            provider_seconds=run.provider_seconds if run is not None else 0.0,
        )

    def _fail(self, phase: FailedPhase, error_class: str, error: str) -> None:
        """End the turn in `phase`: record it when the journal allows, then resolve the handles."""
        run = self._run
        assert run is not None
        try:
            self._persist(failure_events(self._state, run.turn_id, phase, error_class, error))
        except CairnError as exc:
            log.warning(
                "cairn: session %r: the failed turn could not be recorded (%s); it is marked "
                "interrupted when the session is next loaded",
                self._sid,
                describe_exception(exc),
            )
        self._finish("failed", phase, error_class, error)

    def _finish(
        self, status: TurnStatus, phase: FailedPhase | None = None, error_class: str = "", error: str = ""
    ) -> None:
        run = self._run
        result = self._result(status, phase, error_class=error_class, error=error, run=run)
        self._run = None
        if run is not None:
            run.cancel.set()
            for handle in run.handles:
                handle._finish(result)
        self._advance(TurnEnded())

    def _cancel(self, reason: str) -> bool:
        """End the running turn as the host asked: its open calls closed, `turn-cancelled`, `cancelled`.

        What it waited for is abandoned: the provider stops streaming (the
        turn's cancel event), and a compaction's, a tool's or a timer's answer
        is stale when it comes (`machine.step`). Returns False: the turn ended.
        """
        run = self._run
        assert run is not None
        self._compaction = None
        try:
            self._persist(cancel_events(self._state, run.turn_id, reason))
        except CairnError as exc:
            log.warning(
                "cairn: session %r: the cancelled turn could not be recorded (%s); it is marked "
                "interrupted when the session is next loaded",
                self._sid,
                describe_exception(exc),
            )
        self._finish("cancelled", error=reason)
        return False

    def _abandon(self, reason: str, *, persist: bool, error_class: str = "interrupted") -> None:
        """Resolve everything in flight (stop or crash): no handle or reply is left hanging.

        A turn waiting for a deferred result is not interrupted by a stop: the log keeps it
        open (its `tool-deferred` says what it waits for) and the next load resumes the wait;
        its handles end `failed` with error class `TurnSuspended`."""
        suspended = isinstance(self._mode, AwaitingTools) and self._mode.deferred
        self._advance(Stopped())
        run = self._run
        if run is not None:
            run.cancel.set()
            if suspended:
                error_class = "TurnSuspended"
                reason = f"{reason}; the turn waits on in the log for its deferred tool result"
            elif persist:
                with contextlib.suppress(CairnError):  # else marked at the next load
                    self._persist(interrupted_events(self._state, reason))
            result = self._result("failed", "interrupted", error_class=error_class, error=reason, run=run)
            self._run = None
            for handle in run.handles:
                handle._finish(result)
        rejected = self._result("rejected", "", error_class=error_class, error=reason)
        for send in self._sends:
            send.handle._finish(rejected)
        self._sends = []
        stopped = SessionStopped(f"session {self._sid}: {reason}")
        for manual in self._manual:
            reply_error(manual.reply, stopped)
        self._manual = []
        pending = self._compaction
        self._compaction = None
        if pending is not None and pending.reply is not None:
            reply_error(pending.reply, stopped)


Reply = TypeVar("Reply")


def reply_with(future: concurrent.futures.Future[Reply], value: Reply) -> None:
    """Answer a manual compaction's caller (a caller that gave up is no error)."""
    with contextlib.suppress(concurrent.futures.InvalidStateError):
        future.set_result(value)


def reply_error(future: concurrent.futures.Future[Any], error: BaseException) -> None:
    """Fail a manual compaction's caller with `error` (a caller that gave up is no error)."""
    with contextlib.suppress(concurrent.futures.InvalidStateError):
        future.set_exception(error)
