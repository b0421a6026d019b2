"""The session actor's turn loop: starting and steering a turn, each request, the provider's answer.

A layer of the session actor (`core` explains the chain): the shell that
does what `machine.step`'s effects ask (`SessionActor._carry_out` dispatches them). A turn:

    Send -> [session-started], user-message, turn-started, with the first request in the
            same append when L1 has nothing to do first (`preparing.first_request`)
    repeat: steering messages that arrived meanwhile -> user-message (C11);
            L1 and H1 one stage at a time (`preparing.before_request`), a compaction
            waited for by message (compacting.py); the request persisted, then sent
        ProviderDone -> assistant-message + usage; its tool calls run one after the other
            off this thread (tool_calls.py), each outcome back as `ToolDone`, recorded;
            none: turn-completed (unless a steering message waits: go on)
        ProviderFailed -> `turn.provider_failure`'s verdict, its `provider-error` first:
            retry after the wait (a timer tells `RetryRequest`), recover (R3), or turn-failed

The actor never blocks on a peer that may call back: the provider, the
compactor, a tool and a timer all answer by message.
"""

from __future__ import annotations

import contextlib
import logging
from typing import assert_never

import pykka

from cairn.actors.errors import NotInterrupted
from cairn.actors.provider.actor import ProviderDone, ProviderFailed, StreamJob
from cairn.actors.provider.base import (
    ProviderRequest,
)
from cairn.actors.session import machine, preparing
from cairn.actors.session.admission import Admitting
from cairn.actors.session.continuing import continuing, dismissal
from cairn.actors.session.core import reply_error, reply_with
from cairn.actors.session.deferred import DeferredWait
from cairn.actors.session.handoff import handoff_failure_line
from cairn.actors.session.images import inline_image_blobs
from cairn.actors.session.inflight import JudgedFailure, TurnRun
from cairn.actors.session.messages import (
    ContinueTurn,
    DismissTurn,
    RetryRequest,
    Send,
    ToolDone,
    tell_after,
    tell_from_thread,
)
from cairn.actors.session.request import (
    AssembledRequest,
    FirstRequest,
    assemble,
    request_event,
)
from cairn.actors.session.slimming import read_only_tools
from cairn.actors.session.tool_calls import run_tool
from cairn.actors.session.tracker import Occupancy
from cairn.actors.session.turn import (
    completion_event,
    error_outcome,
    response_events,
    start_events,
    steering_events,
    tool_result_event,
)
from cairn.actors.session.verdict import Fail, FailClosed, FailureDecision, provider_failure
from cairn.actors.tools import Deferred, ToolOutcome
from cairn.events.codec import Record
from cairn.events.errors import CairnError, InvalidEvent, LineTooLarge, MalformedEvent
from cairn.events.kinds import ToolDeferred, TurnStarted
from cairn.events.model import ToolCall

log = logging.getLogger("cairn.session")

#: the reason recorded for a turn a message sent with `mid_turn="interrupt"` cancelled
INTERRUPTING = "a new message was sent with mid_turn='interrupt'"


class TurnLoop(Admitting):
    """The turn loop of the session actor (see the module doc)."""

    # -- starting and steering ------------------------------------------------------------------

    def _start(self, sends: list[Send]) -> None:
        if not self._loaded:
            self._load()
        try:
            self._settle()  # an earlier append timed out: the log says what became of it
        except CairnError as exc:
            result = self._result("rejected", "", error_class=type(exc).__name__, error=str(exc))
            for send in sends:
                send.handle._finish(result)
            return
        accepted, joining = self._accept(sends)
        if not accepted:
            return self._resume()
        first = next((send for send in accepted if send.workspace is not None), accepted[0])
        request: FirstRequest | None = None
        try:
            events, turn_id = start_events(
                self._state,
                [send.text for send in accepted],
                settings=first.settings,
                workspace=first.workspace,
                keys=[send.key for send in accepted],
            )
            self._run = TurnRun(turn_id, [send.handle for send in accepted] + joining)
            self._advance(machine.TurnStarting())
            if not self._sends:  # C11: a waiting message is recorded before the first request
                request = preparing.first_request(
                    self._sid,
                    self._state,
                    self._view,
                    events,
                    now_ms=self._rt.clock_ms(),
                    turn_id=turn_id,
                    max_requests=self._rt.max_requests_per_turn,
                )
            self._persist([*events, request.event] if request is not None else events)
        except CairnError as exc:
            self._run = None
            result = self._result("rejected", "", error_class=type(exc).__name__, error=str(exc))
            for send in accepted:
                send.handle._finish(result)
            for handle in joining:
                handle._finish(result)
            return self._advance(machine.TurnEnded())
        self._remember(accepted, turn_id)
        if request is None:
            return self._next_request()
        self._dispatch(request.assembled, request.request_id)

    def _continue(self, message: ContinueTurn) -> None:
        """Continue the interrupted turn `message.turn_id` (`continuing`): a new turn on its message."""
        opening: TurnStarted | str | CairnError
        try:
            records = self._settled_records()
            opening = continuing(self._sid, self._state, records, message.turn_id)
        except CairnError as exc:
            opening = exc
        if not isinstance(opening, TurnStarted):
            error_class = "NotInterrupted" if isinstance(opening, str) else type(opening).__name__
            message.handle._finish(self._result("rejected", "", error_class=error_class, error=str(opening)))
            return self._resume()
        self._run = TurnRun(opening.turn_id, [message.handle])
        self._advance(machine.TurnStarting())
        if self._try_persist([opening], "provider"):
            self._next_request()

    def _dismiss(self, message: DismissTurn) -> None:
        """Record that the interrupted turn `message.turn_id` will not be continued (`turn-dismissed`)."""
        try:
            event = dismissal(self._sid, self._settled_records(), message.turn_id, message.reason)
            if isinstance(event, str):
                raise NotInterrupted(event)
            self._persist([event])
        except CairnError as exc:
            reply_error(message.reply, exc)
        else:
            reply_with(message.reply, None)
        self._resume()

    def _settled_records(self) -> list[Record]:
        """The session's records, once it is loaded and settled (read whole: continuing is rare);
        the journal's error when it cannot be read."""
        if not self._loaded:
            self._load()
        self._settle()
        return list(self._journal.read(self._sid))

    def _steer(self) -> bool:
        """Record the messages that arrived during the turn; False when the turn failed doing it."""
        run = self._run
        assert run is not None
        steering = [send for send in self._sends if send.mid_turn == "steer"]
        self._sends = [send for send in self._sends if send.mid_turn != "steer"]  # after the turn
        sends, joining = self._accept(steering)
        if not sends:
            return True
        run.handles.extend(send.handle for send in sends)
        run.handles.extend(joining)
        events = steering_events(self._state, [send.text for send in sends], [send.key for send in sends])
        if not self._try_persist(events, "provider"):
            return False
        self._remember(sends, run.turn_id)
        return True

    def _resume(self) -> None:
        """Idle again: run a waiting manual compaction, else start a turn with the waiting messages."""
        if not isinstance(self._mode, machine.Idle):
            return
        if self._manual:
            return self._manual_start(self._manual.pop(0))
        if self._sends:
            sends, self._sends = self._sends, []
            self._start(sends)

    # -- before each request (L1, H) --------------------------------------------------------------

    def _next_request(self) -> None:
        """The messages that arrived meanwhile, then L1 and H1, then the request."""
        if self._steer():
            self._prepare("")

    def _prepare(self, done: preparing.L1Done) -> None:
        """L1 and H1 before the turn's next request, one stage at a time (`preparing.before_request`)."""
        run = self._run
        assert run is not None
        while True:
            move = preparing.before_request(
                self._state,
                self._view,
                now_ms=self._rt.clock_ms(),
                done=done,
                requests=run.requests,
                max_requests=self._rt.max_requests_per_turn,
                handoff_failed=run.handoff_failed,
            )
            match move:
                case preparing.TooManyRequests(requests):
                    why = f"the turn made {requests} requests without the model finishing"
                    return self._fail("provider", "too-many-requests", why)
                case preparing.SlimFirst(event, stage):
                    if not self._try_persist([event], "compaction"):
                        return
                    done = stage
                case preparing.CompactFirst(source):
                    return self._compact("threshold", source=source)
                case preparing.WriteHandoff(event):
                    try:
                        self._persist([event])
                    except CairnError as exc:
                        self._handoff_failed(exc)
                    done = "handoff"
                case preparing.HandoffRefused(error):
                    self._handoff_failed(error)
                    done = "handoff"
                case preparing.SendRequest(occ):
                    return self._send_request(occ)
                case _:
                    assert_never(move)

    def _send_request(self, occ: Occupancy) -> None:
        """L1 (6): the request, persisted, then sent."""
        run = self._run
        assert run is not None
        assembled = assemble(self._state, self._view, occ=occ)
        request_id = f"r{self._state.last_seq + 1}"
        event = request_event(assembled, request_id=request_id, turn_id=run.turn_id, attempt=run.attempt)
        if not self._try_persist([event], "provider"):
            return
        self._dispatch(assembled, request_id)

    def _dispatch(self, assembled: AssembledRequest, request_id: str) -> None:
        """L1 (6): send the request whose event is on disk to the provider actor."""
        run = self._run
        assert run is not None
        run.requests += 1
        run.begin(request_id, self._rt.clock_ms())
        job = next(self._jobs)
        self._advance(machine.RequestSent(job, request_id))
        info = self._state.info
        request = ProviderRequest(
            model=assembled.model,
            messages=inline_image_blobs(assembled.messages, self._rt.journal.read_blob),
            tools=assembled.tools,
            purpose="turn",
            max_output_tokens=info.max_output_tokens if info is not None else None,
            timeout_s=self._rt.request_timeout_s,
            request_id=request_id,
            cache_breakpoints=assembled.cache_breakpoints,
        )
        provider = self._provider
        try:
            if provider is None:
                raise pykka.ActorDeadError("no provider actor")
            provider.tell(StreamJob(job, request, self.actor_ref, run.cancel))
        except pykka.ActorDeadError:
            self._fail("provider", "ActorDeadError", "the provider actor is gone")

    def _handoff_failed(self, exc: BaseException) -> None:
        """H7: one line naming the session by a hash and the error class; no retry this turn."""
        log.warning(handoff_failure_line(self._sid, exc))
        assert self._run is not None
        self._run.handoff_failed = True

    # -- the provider's answer -----------------------------------------------------------------

    def _record_response(self, done: ProviderDone, *, completes: bool) -> bool:
        """The assistant message and its usage, with `turn-completed` when the turn ends with it."""
        run = self._run
        assert run is not None
        run.provider_seconds += done.seconds
        text = "".join(run.text_parts)
        events = response_events(
            self._state,
            request_id=run.request_id,
            text=text,
            reasoning="".join(run.reasoning_parts),
            reasoning_blocks=run.reasoning_blocks,
            calls=run.calls,
            usage=run.usage,
            finish_reason=run.finish,
            first_output_ms=run.first_output_ms,
            response_ms=max(0, self._rt.clock_ms() - run.sent_ms),
        )
        run.text = text or run.text
        if completes:
            events.append(completion_event(run.turn_id, run.requests))
        if not self._try_persist(events, "provider"):
            return False
        run.tool_chars = 0
        return True

    # -- tools -------------------------------------------------------------------------------------------

    def _run_tool(self, job: int, index: int, call: ToolCall) -> None:
        """Run one call off this thread; its outcome comes back as `ToolDone` (`machine.ToolEnded`).

        On the host's tool runner (bounded threads, each call within its
        timeout) a thread waits for it, so this actor goes on taking messages
        meanwhile; without a runner the call runs here, as before.
        """
        run = self._run
        assert run is not None
        info = self._state.info
        tools, runner, sid, turn_id = self._rt.tools, self._rt.tool_runner, self._sid, run.turn_id
        workspace = info.workspace if info is not None else None

        def outcome() -> ToolDone:
            done = run_tool(tools, call, session=sid, turn_id=turn_id, workspace=workspace, runner=runner)
            return ToolDone(job, index, done)

        if runner is None:
            return self.actor_ref.tell(outcome())
        tell_from_thread(self.actor_ref, outcome, name=f"cairn-tool-wait-{turn_id}")

    def _wait_for_result(self, job: int, index: int, deferred: Deferred) -> bool:
        """Record that the call waits (`tool-deferred`: a restart resumes the wait), then start its
        timeout. False when the record failed: the turn failed in phase `tool`."""
        run = self._run
        assert run is not None and isinstance(self._mode, machine.AwaitingTools)
        call = self._mode.calls[index]
        limit = deferred.timeout_s if deferred.timeout_s is not None else self._rt.deferred_timeout_s
        waits = ToolDeferred(call_id=call.id, tool_name=call.name, timeout_ms=round(limit * 1000))
        if not self._try_persist([waits], "tool"):
            return False
        self._time_out(job, index, limit, limit)
        return True

    def _time_out(self, job: int, index: int, after_s: float, limit_s: float) -> None:
        """After `after_s`, an error result for the call at `index` comes back as `ToolDone`, unless
        the host's result came first (then it is stale, `machine.step`)."""
        run = self._run
        assert run is not None
        text = f"no result came for this tool call within {limit_s:g} s (it was deferred to the host)"
        timed_out = ToolDone(job, index, error_outcome(text))
        tell_after(self.actor_ref, self._rt.sleep, after_s, timed_out, name=f"cairn-deferred-{run.turn_id}")

    def _resume_wait(self, wait: DeferredWait) -> None:
        """The log's open turn waits for a deferred result (`deferred.deferred_wait`): wait on, with
        the time its timeout has left. No handle follows it: the host's `Turn` went with the process."""
        run = TurnRun(wait.turn_id, [])
        run.requests = wait.requests
        self._run = run
        self._advance(machine.WaitResumed(next(self._jobs), wait.calls, wait.answered), wait)

    def _record_tool(self, call: ToolCall, outcome: ToolOutcome) -> bool:
        """Persist one call's result; an outcome the log refuses (too large) becomes an error result.

        False when the turn failed (phase `tool`): the journal could not write.
        """
        run = self._run
        assert run is not None
        read_only = read_only_tools(self._state.info)
        kept = self._rt.max_tool_output_chars
        result, used = tool_result_event(
            call, outcome, read_only=read_only, used=run.tool_chars, max_chars=kept
        )
        try:
            self._persist([result])
        except (LineTooLarge, InvalidEvent, MalformedEvent) as exc:  # the outcome's fault, not the store's
            refused = error_outcome(f"the tool {call.name!r} returned a result the log cannot hold: {exc}")
            result, used = tool_result_event(call, refused, read_only=read_only, used=run.tool_chars)
            if not self._try_persist([result], "tool"):
                return False
        except CairnError as exc:
            self._fail("tool", type(exc).__name__, str(exc))
            return False
        run.tool_chars = used
        return True

    # -- a provider error --------------------------------------------------------------------------------

    def _judge(self, failure: ProviderFailed) -> None:
        """`turn.provider_failure` on the error of the request awaited; the machine takes its verdict."""
        run = self._run
        assert run is not None
        run.provider_seconds += failure.seconds
        decision = provider_failure(
            self._state,
            failure,
            turn_id=run.turn_id,
            request_id=run.request_id,
            delivered=run.delivered,
            retries_done=run.transient_retries,
            retries_allowed=self._rt.turn_retries,
            draw=self._rt.retry_draw(),
            policy=self._rt.retry,
        )
        self._advance(machine.ErrorJudged(failure.job, decision.verdict), JudgedFailure(failure, decision))

    def _record_error(self, decision: FailureDecision) -> bool:
        """The `provider-error` first; a failure's closing events are best effort (the turn ends anyway)."""
        if isinstance(decision.verdict, Fail | FailClosed):
            with contextlib.suppress(CairnError):
                self._persist(decision.events)
            return True
        return self._try_persist(decision.events, "provider")

    def _retry_later(self, job: int, wait_ms: int) -> None:
        """Send the turn's request again after `wait_ms`, without blocking this actor."""
        run = self._run
        assert run is not None
        run.transient_retries += 1
        run.attempt += 1
        message = RetryRequest(run.turn_id, job)  # the job awaited: a stale timer is ignored
        tell_after(self.actor_ref, self._rt.sleep, wait_ms / 1000, message, name=f"cairn-retry-{run.turn_id}")
