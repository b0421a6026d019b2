"""The session actor: one conversation's turn loop, every decision persisted before it is applied.

One `SessionActor` per live session, on its own (non-daemon) thread. It owns
the session's `SessionState`, which is only ever changed by appending events
to the journal, waiting for the acknowledgement, and folding the stored
records with the same `evolve` replay uses (persist, then apply). It spawns
its provider actor when loaded and its compactor actor on first need, and
stops both with itself.

Its code is a chain of layers (`core` has the map): `core` (state,
persisting, ending a turn), `compacting` (threshold, reactive and manual
compaction), `turn_loop` (the turn loop, documented there), and this
module: the lifecycle, and the dispatch of its messages (`messages`, one
union matched in `on_receive`).

Failure rules: a journal error on any append fails the turn in the phase of
that step (turn.py); memory stays as it was, since only acknowledged records
are applied. Any other exception is a bug: the turn's handles are failed
(phase `interrupted`), the exception escapes to pykka, `on_failure` stops
the children and fails queued messages, and the host rebuilds the session by
replay on its next message (which marks the open turn `interrupted`).
Messages that must answer (`Load`, `Query`) are asks: an error goes back to
the caller and never kills the actor (PITFALLS 16).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, assert_never, cast

from cairn.actors.compactor.actor import CompactionDone
from cairn.actors.errors import SessionCrashed, ToolNotWaiting, TurnRunning, describe_exception
from cairn.actors.provider.actor import ProviderDone, ProviderFailed, ProviderItem
from cairn.actors.session import machine
from cairn.actors.session.core import reply_error, reply_with
from cairn.actors.session.deferred import DeferredWait
from cairn.actors.session.inflight import JudgedFailure
from cairn.actors.session.machine import (
    CancelAsked,
    CompactionEnded,
    HostMessage,
    ProviderErred,
    ResponseEnded,
    RetryDue,
    Streamed,
    ToolEnded,
    ToolResolved,
    ToolWaits,
)
from cairn.actors.session.messages import (
    SESSION_MESSAGES,
    CancelRequest,
    ContinueTurn,
    DismissTurn,
    Load,
    ManualCompact,
    Query,
    ResolveTool,
    RetryRequest,
    Send,
    SessionMessage,
    ToolDone,
)
from cairn.actors.session.turn import unique_calls
from cairn.actors.session.turn_loop import INTERRUPTING, TurnLoop
from cairn.actors.tools import Deferred

log = logging.getLogger("cairn.session")


class SessionActor(TurnLoop):
    """One conversation's turn loop (see the module doc). Started, loaded and stopped by the host."""

    # -- lifecycle ---------------------------------------------------------------------------

    def on_stop(self) -> None:
        self._abandon("the session was stopped while the turn ran", persist=True)
        self._release()

    def on_failure(self, exception_type: Any, exception_value: Any, traceback: Any) -> None:
        self._abandon(f"the session crashed ({getattr(exception_type, '__name__', 'error')})", persist=False)
        self._release()
        self._fail_queued()

    def _release(self) -> None:
        """Stop the children, newest first; never raises."""
        for ref in (self._compactor, self._provider):
            if ref is not None:
                with contextlib.suppress(Exception):
                    ref.stop(block=True, timeout=self._rt.stop_timeout_s)
        self._compactor = None
        self._provider = None

    def _fail_queued(self) -> None:
        """Resolve messages still queued in a crashed actor's inbox (pykka would drop tells).

        Reads pykka's inbox and its envelopes (`message`, `reply_to`), which
        pykka documents as an internal type. Safe here: this runs in
        `on_failure`, on the actor's own thread, after the loop took its last
        message and before pykka's teardown drains the same inbox (which
        would answer asks with `ActorDeadError` and drop tells unanswered);
        an envelope taken here is simply not seen there.
        """
        inbox = self.actor_inbox
        while not inbox.empty():
            envelope = inbox.get()
            match envelope.message:
                case Send(handle=handle):
                    handle._finish(
                        self._result(
                            "rejected",
                            "",
                            error_class="SessionCrashed",
                            error="the session crashed; send again",
                        )
                    )
                case ManualCompact(reply=reply):
                    reply_error(reply, SessionCrashed(f"session {self._sid} crashed; try again"))
                case _:
                    if envelope.reply_to is not None:  # an ask: its caller gets the error
                        with contextlib.suppress(Exception):
                            crashed = SessionCrashed(f"session {self._sid} crashed")
                            envelope.reply_to.set_exception(exc_info=(SessionCrashed, crashed, None))

    # -- dispatch -------------------------------------------------------------------------------

    def on_receive(self, message: Any) -> Any:
        """A `SessionMessage`: asks answer (their errors go back to the caller); tells run the turn loop."""
        match message:
            case Load():
                return self._load()
            case Query(what):
                return self._query(what)
            case _ if not isinstance(message, SESSION_MESSAGES):
                return None  # nothing else is sent to a session; anything else is ignored
        try:
            self._handle(cast(SessionMessage, message))
        except Exception as exc:
            # named by its id (ids are validated safe to print), so an operator can find it
            # with `cairn log`; only H7's hand-off lines name a session by a hash
            log.error(
                "cairn: session %r crashed on %s: %s",
                self._sid,
                type(message).__name__,
                describe_exception(exc),
            )
            # Dead before anyone hears of it: a message sent after the failed turn's result
            # finds this actor stopped, and the host rebuilds the session by replay. Setting
            # pykka's `actor_stopped` (a public attribute; `ActorRef.is_alive` reads it) is
            # safe: pykka only ever sets it, never clears it, and sets it itself in
            # `_handle_failure` right after this raise; the loop reads it only between
            # messages, on this thread. Setting it early only makes `tell`s from other
            # threads fail now with `ActorDeadError` instead of queueing behind a dying actor.
            self.actor_stopped.set()
            self._abandon(
                f"the session crashed ({type(exc).__name__})", persist=False, error_class=type(exc).__name__
            )
            raise
        return None

    def _handle(self, message: SessionMessage) -> None:
        """A tell, as the input of the state machine (`machine`) it is; `core._advance` carries it out."""
        match message:
            case ProviderItem(job=job):
                self._advance(Streamed(job), message)
            case ProviderDone(job=job):
                calls = unique_calls(self._run.calls) if self._run is not None else ()
                steering = any(send.mid_turn == "steer" for send in self._sends)
                self._advance(ResponseEnded(job, calls, steering_waits=steering), message)
            case ProviderFailed(job=job):
                self._advance(ProviderErred(job), message)
            case CompactionDone():
                self._advance(CompactionEnded(message.job), message)
            case Send(mid_turn=mid_turn):
                self._advance(HostMessage("send", mid_turn), message)
            case CancelRequest(handle=handle):
                if not self._withdraw(handle) and self._run is not None and handle in self._run.handles:
                    self._advance(CancelAsked(), message)
            case ManualCompact():
                self._advance(HostMessage("compact"), message)
            case RetryRequest(token=job):
                self._advance(RetryDue(job))
            case ToolDone(job=job, index=index, outcome=Deferred()):
                self._advance(ToolWaits(job, index), message)
            case ToolDone(job=job, index=index):
                self._advance(ToolEnded(job, index), message)
            case ContinueTurn():
                self._advance(HostMessage("continue"), message)
            case DismissTurn():
                self._advance(HostMessage("dismiss"), message)
            case ResolveTool(call_id=call_id):
                self._advance(ToolResolved(call_id), message)
            case Load() | Query():
                pass  # asks, answered in `on_receive`
            case _:
                assert_never(message)

    # -- the machine's effects ---------------------------------------------------------------------

    def _carry_out(self, effect: machine.Effect, cause: object) -> bool:
        """One effect of `machine.step`, with the message that caused it; False when the turn ended."""
        # long: one match arm per effect of the machine
        match effect:
            case machine.Take(kind) | machine.Queue(kind) if kind == "compact":
                assert isinstance(cause, ManualCompact)
                if isinstance(effect, machine.Take):
                    self._manual_start(cause)
                else:
                    self._manual.append(cause)  # after the turn
            case machine.Take("continue"):
                assert isinstance(cause, ContinueTurn)
                self._continue(cause)
            case machine.Take("dismiss"):
                assert isinstance(cause, DismissTurn)
                self._dismiss(cause)
            case machine.Take():
                assert isinstance(cause, Send)
                self._start([cause])
            case machine.Queue():
                assert isinstance(cause, Send)
                self._queue_send(cause)
            case machine.Refuse():
                why = f"session {self._sid} is running a turn"
                if isinstance(cause, DismissTurn):
                    reply_error(cause.reply, TurnRunning(why))
                else:
                    assert isinstance(cause, Send | ContinueTurn)
                    if isinstance(cause, Send):
                        why += "; the message was sent with mid_turn='reject'"
                    cause.handle._finish(self._result("rejected", "", error_class="TurnRunning", error=why))
            case machine.CancelTurn():
                reason = cause.reason if isinstance(cause, CancelRequest) else INTERRUPTING
                return self._cancel(reason)
            case machine.TakeItem():
                assert isinstance(cause, ProviderItem) and self._run is not None
                self._run.take(cause.item, self._rt.clock_ms())
            case machine.RecordResponse(completes):
                assert isinstance(cause, ProviderDone)
                return self._record_response(cause, completes=completes)
            case machine.RunTool(job, index, call):
                self._run_tool(job, index, call)
            case machine.WaitForResult(job, index):
                assert isinstance(cause, ToolDone) and isinstance(cause.outcome, Deferred)
                return self._wait_for_result(job, index, cause.outcome)
            case machine.ResumeWait(job, index):
                assert isinstance(cause, DeferredWait)
                self._time_out(job, index, cause.left_ms(self._rt.clock_ms()) / 1000, cause.timeout_ms / 1000)
            case machine.AcceptResult():
                assert isinstance(cause, ResolveTool)
                reply_with(cause.reply, None)
            case machine.RefuseResult():
                assert isinstance(cause, ResolveTool)
                why = f"no call {cause.call_id!r} of session {self._sid} waits for a result"
                reply_error(cause.reply, ToolNotWaiting(why))
            case machine.RecordTool(call):
                assert isinstance(cause, ToolDone | ResolveTool)
                assert not isinstance(cause.outcome, Deferred)
                return self._record_tool(call, cause.outcome)
            case machine.NextRequest():
                self._next_request()
            case machine.JudgeError():
                assert isinstance(cause, ProviderFailed)
                self._judge(cause)
            case machine.RecordError():
                assert isinstance(cause, JudgedFailure)
                return self._record_error(cause.decision)
            case machine.WaitThenRetry(job, wait_ms):
                self._retry_later(job, wait_ms)
            case machine.RecoverContext():
                assert isinstance(cause, JudgedFailure)
                self._recover(cause.failure)
            case machine.EndTurn("completed"):
                self._finish("completed")
            case machine.EndTurn(_):
                assert isinstance(cause, JudgedFailure)
                self._finish("failed", "provider", cause.failure.error_class, cause.decision.detail)
            case machine.TakeCompaction(trigger):
                assert isinstance(cause, CompactionDone)
                return self._take_compaction(cause, trigger)
            case machine.Resume():
                self._resume()
            case _:
                assert_never(effect)
        return True
