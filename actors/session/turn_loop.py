"""The session actor's turn loop: starting and steering a turn, each request, the provider's answer.

A layer of the session actor (`core` explains the chain). The loop
(DESIGN §3), driven by messages so that the actor never blocks on a peer
that may call back (the provider and the compactor answer by message, not
by return value):

    Send -> [session-started], user-message, turn-started, and in the same
            append the first request when L1 has nothing to do before it
            (`_first_request`: one fsync before the first token, not two)
    repeat:
        steering messages that arrived meanwhile -> user-message
        L1: micro (S4, persisted, applied) -> snip plan (S1)
            below compaction_due / unknown: persist the snip plan
            compaction_due: compact (compacting.py), then on with the checkpoint
        H1: hand-off persisted before the request that carries it (H6);
            a failed write is logged once and not retried this turn (H7)
        request persisted -> StreamJob ... ProviderItem* (deltas to the client)
        ProviderDone -> assistant-message + usage
            tool calls: the host's executor runs each in turn off this thread (tool_calls.py);
                        each outcome comes back as `ToolDone` and is recorded
            none: turn-completed (unless a steering message waits: go on)
        ProviderFailed -> the verdict of `turn.provider_verdict`, its `provider-error` first:
            retry after the wait (a timer tells `RetryRequest`), recover (R3), or turn-failed

Which message is taken in which mode, and what each leads to, is
`machine.step`'s table; the methods here carry out its effects
(`_carry_out`). While it waits for its provider, its compactor, a retry or
a tool, new `Send`s are kept in order and recorded before the next request
(steering, C11); a manual compaction waits for the turn's end.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import assert_never

import pykka

from cairn.actors.compactor.actor import CompactionDone
from cairn.actors.errors import UnknownSession, WorkspaceMismatch
from cairn.actors.provider.actor import ProviderDone, ProviderFailed, ProviderItem, StreamJob
from cairn.actors.provider.base import (
    Finished,
    ProviderOutput,
    ProviderRequest,
    ReasoningBlockReady,
    ReasoningDelta,
    TextDelta,
    ToolCallReady,
    UsageReport,
)
from cairn.actors.session.compacting import Compacting
from cairn.actors.session.handoff import InvalidHandoff, decide_handoff, handoff_failure_line
from cairn.actors.session.idempotency import KeyedMessage, key_index, same_message, turn_outcome
from cairn.actors.session.images import inline_image_blobs
from cairn.actors.session.inflight import TurnRun
from cairn.actors.session.machine import (
    Effect,
    EndTurn,
    ErrorJudged,
    Idle,
    JudgeError,
    NextRequest,
    Queue,
    RecordError,
    RecordResponse,
    RecordTool,
    RecoverContext,
    RequestSent,
    Resume,
    RunTool,
    Take,
    TakeCompaction,
    TakeItem,
    TurnEnded,
    TurnStarting,
    WaitThenRetry,
)
from cairn.actors.session.messages import ManualCompact, RetryRequest, Send, ToolDone
from cairn.actors.session.request import (
    AssembledRequest,
    FirstRequest,
    assemble,
    request_event,
    speculative,
)
from cairn.actors.session.slimming import apply_plan, plan_micro, plan_snip, read_only_tools
from cairn.actors.session.stream import Turn
from cairn.actors.session.tool_calls import run_tool
from cairn.actors.session.tracker import Occupancy, occupancy
from cairn.actors.session.turn import (
    Fail,
    FailClosed,
    FailureDecision,
    completion_event,
    error_outcome,
    provider_failure,
    response_events,
    start_events,
    steering_events,
    tool_result_event,
    unique_calls,
)
from cairn.actors.tools import ToolOutcome
from cairn.events.errors import CairnError, InvalidEvent, LineTooLarge, MalformedEvent
from cairn.events.kinds import EventBase
from cairn.events.model import ToolCall, parts_of

log = logging.getLogger("cairn.session")


class TurnLoop(Compacting):
    """The turn loop of the session actor (see the module doc)."""

    # -- starting and steering ------------------------------------------------------------------

    def _queue_send(self, message: Send) -> None:
        """A message that arrived while the session waits: recorded before the next request, or after."""
        key = message.key
        if key is not None and all(send.key != key for send in self._sends) and self._by_key(message, {}, []):
            return  # a resend: joined the running turn, or answered from the log, at once
        self._sends.append(message)

    def _accept(self, sends: list[Send]) -> tuple[list[Send], list[Turn]]:
        """The sends this session records, and the handles of resends that join them.

        A new session takes the workspace of its first message that names one;
        every later message must name the same one, or none. A send whose
        idempotency key is known is answered here (`_by_key`): it joins its
        turn (returned when that is one of these sends) or gets its outcome.
        """
        info = self._state.info
        workspace = info.workspace if info is not None else None
        accepted: list[Send] = []
        joining: list[Turn] = []
        batch: dict[str, Send] = {}
        for send in sends:
            problem = ""
            if workspace is None and send.workspace is None:
                problem = f"session {self._sid} is new: its first message needs a workspace"
            elif workspace is not None and send.workspace not in (None, workspace):
                problem = f"session {self._sid} works in {workspace}, not {send.workspace}"
            if problem:
                kind = UnknownSession if workspace is None else WorkspaceMismatch
                send.handle._finish(self._result("rejected", "", error_class=kind.__name__, error=problem))
                continue
            if send.key is not None:
                if self._by_key(send, batch, joining):
                    continue
                batch[send.key] = send
            if workspace is None:
                workspace = send.workspace
            accepted.append(send)
        return accepted, joining

    def _by_key(self, send: Send, batch: dict[str, Send], joining: list[Turn]) -> bool:
        """Whether `send`'s key was seen: then it joins, is answered from the log, or is refused."""
        key = send.key
        assert key is not None
        earlier = batch.get(key)
        hit = self._key_index().get(key)
        seen = earlier.text if earlier is not None else hit.content if hit is not None else None
        if seen is None:
            return False
        if not same_message(seen, send.text):
            problem = f"idempotency key {key!r} was used for another message of session {self._sid}"
            send.handle._finish(
                self._result("rejected", "", error_class="IdempotencyKeyReused", error=problem)
            )
            return True
        run = self._run
        if earlier is not None:
            joining.append(send.handle)  # its first send is recorded with this batch
        elif hit is not None and run is not None and hit.turn_id == run.turn_id:
            send.handle._join(run.handles[0])
            run.handles.append(send.handle)
        elif hit is not None:
            records, result = turn_outcome(list(self._journal.read(self._sid)), self._sid, hit.turn_id)
            for record in records:
                send.handle._publish(record)
            send.handle._finish(result)
        return True

    def _key_index(self) -> dict[str, KeyedMessage]:
        """The keys in this session's log and their turns, read once (then kept up to date)."""
        if self._keys is None:
            self._keys = key_index(self._journal.read(self._sid))
        return self._keys

    def _remember(self, sends: list[Send], turn_id: str) -> None:
        """The keys of `sends`, now recorded in turn `turn_id`."""
        if self._keys is None:
            return  # read from the log when first needed, these included
        for send in sends:
            if send.key is not None:
                self._keys.setdefault(send.key, KeyedMessage(turn_id, parts_of(send.text)))

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
            self._advance(TurnStarting())
            request = self._first_request(events)
            self._persist([*events, request.event] if request is not None else events)
        except CairnError as exc:
            self._run = None
            result = self._result("rejected", "", error_class=type(exc).__name__, error=str(exc))
            for send in accepted:
                send.handle._finish(result)
            for handle in joining:
                handle._finish(result)
            return self._advance(TurnEnded())
        self._remember(accepted, turn_id)
        if request is None:
            return self._next_request()
        self._dispatch(request.assembled, request.request_id)

    def _first_request(self, events: list[EventBase]) -> FirstRequest | None:
        """The turn's first request, when it can go out in the same append as the events that
        open the turn (one fsync before the first token instead of two), else None.

        It can when L1 has nothing to do before it: no steering message waiting, no micro-slim,
        no snip, no compaction due and no hand-off due, judged on the state those events would
        make (`speculative`, pure). Otherwise the turn starts as before: the start events
        appended, then `_next_request`. The request is then the one `_send_request` would
        assemble after them: the same state, the same id.
        """
        run = self._run
        assert run is not None
        if self._sends or self._rt.max_requests_per_turn < 1:
            return None
        now = self._rt.clock_ms()
        state = speculative(self._state, self._sid, events, now)
        occ = occupancy(state, self._view)
        if plan_micro(state, self._view, occ, now_ms=now) is not None:
            return None
        if occ.snapshot.phase == "compaction_due" or plan_snip(state, self._view, occ) is not None:
            return None
        try:
            if decide_handoff(state, occ.snapshot, now_ms=now, write_failed=False) is not None:
                return None
        except InvalidHandoff:
            return None  # the normal path logs it (H7)
        assembled = assemble(state, self._view, occ=occ)
        request_id = f"r{state.last_seq + 1}"
        event = request_event(assembled, request_id=request_id, turn_id=run.turn_id, attempt=run.attempt)
        return FirstRequest(event, assembled, request_id)

    def _steer(self) -> bool:
        """Record the messages that arrived during the turn; False when the turn failed doing it."""
        run = self._run
        assert run is not None
        sends, joining = self._accept(self._sends)
        self._sends = []
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
        if not isinstance(self._mode, Idle):
            return
        if self._manual:
            return self._manual_start(self._manual.pop(0))
        if self._sends:
            sends, self._sends = self._sends, []
            self._start(sends)

    # -- before each request (L1, H) --------------------------------------------------------------

    def _next_request(self) -> None:
        run = self._run
        assert run is not None
        if not self._steer():
            return
        if run.requests >= self._rt.max_requests_per_turn:
            return self._fail(
                "provider",
                "too-many-requests",
                f"the turn made {run.requests} requests without the model finishing",
            )
        now = self._rt.clock_ms()
        occ = occupancy(self._state, self._view)
        micro = plan_micro(self._state, self._view, occ, now_ms=now)  # L1 (1)
        if micro is not None:
            if not self._try_persist([micro.event], "compaction"):
                return
            occ = occupancy(self._state, self._view)
        snip = plan_snip(self._state, self._view, occ)  # L1 (2): planned, not applied
        if occ.snapshot.phase == "compaction_due":  # L1 (4)
            source = apply_plan(self._state, snip, now_ms=now).context if snip is not None else None
            return self._compact("threshold", source=source)
        if snip is not None:  # L1 (3)
            if not self._try_persist([snip.event], "compaction"):
                return
            occ = occupancy(self._state, self._view)
        self._send_request(occ)

    def _send_request(self, occ: Occupancy) -> None:
        """L1 steps 5-6: the hand-off when due, then the request, persisted, then sent."""
        run = self._run
        assert run is not None
        occ = self._handoff(run, occ)
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
        run.begin(request_id)
        job = next(self._jobs)
        self._advance(RequestSent(job, request_id))
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

    def _handoff(self, run: TurnRun, occ: Occupancy) -> Occupancy:
        """L1 (5), H1: persist the hand-off when due (H6: before the request that carries it).

        Returns the occupancy the request is assembled with: re-measured when
        a hand-off was recorded, else as given. A failed write is H7's.
        """
        try:
            handoff = decide_handoff(
                self._state, occ.snapshot, now_ms=self._rt.clock_ms(), write_failed=run.handoff_failed
            )
        except InvalidHandoff as exc:
            self._handoff_failed(exc)
            return occ
        if handoff is None:
            return occ
        try:
            self._persist([handoff])
        except CairnError as exc:
            self._handoff_failed(exc)
            return occ
        return occupancy(self._state, self._view)

    def _handoff_failed(self, exc: BaseException) -> None:
        """H7: one line naming the session by a hash and the error class; no retry this turn."""
        log.warning(handoff_failure_line(self._sid, exc))
        assert self._run is not None
        self._run.handoff_failed = True

    # -- the machine's effects ---------------------------------------------------------------------

    def _carry_out(self, effect: Effect, cause: object) -> bool:
        """One effect of `machine.step`, with the message that caused it; False when the turn ended."""
        match effect:
            case Take(kind) | Queue(kind) if kind == "compact":
                assert isinstance(cause, ManualCompact)
                if isinstance(effect, Take):
                    self._manual_start(cause)
                else:
                    self._manual.append(cause)  # after the turn
            case Take():
                assert isinstance(cause, Send)
                self._start([cause])
            case Queue():
                assert isinstance(cause, Send)
                self._queue_send(cause)
            case TakeItem():
                assert isinstance(cause, ProviderItem)
                self._take_item(cause.item)
            case RecordResponse(completes):
                assert isinstance(cause, ProviderDone)
                return self._record_response(cause, completes=completes)
            case RunTool(job, index, call):
                self._run_tool(job, index, call)
            case RecordTool(call):
                assert isinstance(cause, ToolDone)
                return self._record_tool(call, cause.outcome)
            case NextRequest():
                self._next_request()
            case JudgeError():
                assert isinstance(cause, ProviderFailed)
                self._judge(cause)
            case RecordError():
                assert isinstance(cause, _Judged)
                return self._record_error(cause.decision)
            case WaitThenRetry(job, wait_ms):
                self._retry_later(job, wait_ms)
            case RecoverContext():
                assert isinstance(cause, _Judged)
                self._recover(cause.failure)
            case EndTurn("completed"):
                self._finish("completed")
            case EndTurn(_):
                assert isinstance(cause, _Judged)
                self._finish("failed", "provider", cause.failure.error_class, cause.decision.detail)
            case TakeCompaction(trigger):
                assert isinstance(cause, CompactionDone)
                return self._take_compaction(cause, trigger)
            case Resume():
                self._resume()
            case _:
                assert_never(effect)
        return True

    # -- the provider's answer -----------------------------------------------------------------

    def _calls(self) -> tuple[ToolCall, ...]:
        """The tool calls of the response being read (unique ids, K1)."""
        run = self._run
        return unique_calls(run.calls) if run is not None else ()

    def _take_item(self, item: ProviderOutput) -> None:
        run = self._run
        assert run is not None
        run.delivered = True  # R2: output crossed the boundary
        if isinstance(item, TextDelta):
            run.text_parts.append(item.text)
            for handle in run.handles:
                handle._publish(item)
        elif isinstance(item, ReasoningDelta):
            run.reasoning_parts.append(item.text)
            for handle in run.handles:
                handle._publish(item)
        elif isinstance(item, ToolCallReady):
            run.calls.append(item.call)
        elif isinstance(item, ReasoningBlockReady):
            run.reasoning_blocks.append(item.block)
        elif isinstance(item, UsageReport):
            run.usage = item
        elif isinstance(item, Finished):
            run.finish = item.reason

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
        ref = self.actor_ref

        def work() -> None:
            outcome = run_tool(tools, call, session=sid, turn_id=turn_id, workspace=workspace, runner=runner)
            with contextlib.suppress(pykka.ActorDeadError):  # stopped meanwhile: the call is closed
                ref.tell(ToolDone(job, index, outcome))

        if runner is None:
            return work()
        threading.Thread(target=work, name=f"cairn-tool-wait-{turn_id}", daemon=True).start()

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
        self._advance(ErrorJudged(failure.job, decision.verdict), _Judged(failure, decision))

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
        delay_s = wait_ms / 1000
        run.transient_retries += 1
        run.attempt += 1
        message = RetryRequest(run.turn_id, job)  # the job awaited: a stale timer is ignored
        ref, sleep = self.actor_ref, self._rt.sleep

        def wake() -> None:
            sleep(delay_s)
            with contextlib.suppress(pykka.ActorDeadError):
                ref.tell(message)

        threading.Thread(target=wake, name=f"cairn-retry-{run.turn_id}", daemon=True).start()


class _Judged:
    """A provider error and the decision on it, for the effects of its verdict."""

    __slots__ = ("decision", "failure")

    def __init__(self, failure: ProviderFailed, decision: FailureDecision) -> None:
        self.failure = failure
        self.decision = decision
