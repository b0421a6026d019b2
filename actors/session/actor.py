"""The session actor: one conversation's turn loop, every decision persisted before it is applied.

One `SessionActor` per live session, on its own (non-daemon) thread. It owns
the session's `SessionState`, which is only ever changed by appending events
to the journal, waiting for the acknowledgement, and folding the stored
records with the same `evolve` replay uses (persist, then apply). It spawns
its provider actor at start and its compactor actor on first need, and
stops both with itself.

The turn loop (DESIGN §3), driven by messages so that the actor never blocks
on a peer that may call back (the provider and the compactor answer by
message, not by return value):

    Send -> [session-started], user-message, turn-started
    repeat:
        steering messages that arrived meanwhile -> user-message
        L1: micro (S4, persisted, applied) -> snip plan (S1)
            below compaction_due / unknown: persist the snip plan
            compaction_due: CompactJob(snip result) ... CompactionDone
                -> persist the checkpoint (K2), then swap
        H1: hand-off persisted before the request that carries it (H6);
            a failed write is logged once and not retried this turn (H7)
        request persisted -> StreamJob ... ProviderItem* (deltas to the client)
        ProviderDone -> assistant-message + usage
            tool calls: run the host's executor for each, record each result
            none: turn-completed (unless a steering message waits: go on)
        ProviderFailed -> provider-error (with the server's Retry-After hint and the wait);
            transient, before any output: sent again after that wait (provider.retry);
            context-limit: reactive recovery (R); else turn-failed

While it waits for its provider or compactor, new `Send`s are kept in order
and recorded before the next request (steering, C11); a manual compaction
waits for the turn's end. Both are in-flight bookkeeping of this process,
never acknowledged, so nothing of them needs replay.

Failure rules: a journal error on any append fails the turn in the phase of
that step (turn.py); memory stays as it was, since only acknowledged records
are applied. Any other exception is a bug: the turn's handles are failed
(phase `interrupted`), the exception escapes to pykka, `on_failure` stops
the children and fails queued messages, and the host rebuilds the session by
replay on its next message (which marks the open turn `interrupted`).
Messages that must answer (`Load`, `Query`) are asks: an error goes back to
the caller and never kills the actor.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import logging
import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pykka

from cairn.actors.compactor.actor import CompactionDone, CompactJob, CompactorActor
from cairn.actors.compactor.errors import CompactionIneffective
from cairn.actors.compactor.gates import manual_compaction_due
from cairn.actors.compactor.hooks import PreCompactionHook
from cairn.actors.compactor.service import CompactionConfig, CompactionRequest, Compactor
from cairn.actors.errors import (
    SessionCrashed,
    SessionStopped,
    UnknownSession,
    WorkspaceMismatch,
    describe_exception,
)
from cairn.actors.provider.actor import ProviderActor, ProviderDone, ProviderFailed, ProviderItem, StreamJob
from cairn.actors.provider.base import (
    Finished,
    Provider,
    ProviderRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallReady,
    UsageReport,
)
from cairn.actors.provider.retry import RetryPolicy
from cairn.actors.session.handoff import InvalidHandoff, decide_handoff, handoff_failure_line, is_hidden_event
from cairn.actors.session.images import inline_image_blobs
from cairn.actors.session.recovery import recovery_source, snip_checkpoint
from cairn.actors.session.request import AssembledRequest, assemble, request_event
from cairn.actors.session.settings import SessionSettings
from cairn.actors.session.slimming import apply_plan, plan_micro, plan_snip, read_only_tools
from cairn.actors.session.stream import Turn, TurnResult, TurnStatus
from cairn.actors.session.tracker import Occupancy, occupancy
from cairn.actors.session.turn import (
    Fail,
    FailClosed,
    Recover,
    RetryAfter,
    UserContent,
    completion_event,
    error_outcome,
    failure_events,
    interrupted_events,
    provider_failure,
    response_events,
    start_events,
    steering_events,
    tool_result_event,
    unique_calls,
)
from cairn.actors.session.view import HistoryView
from cairn.actors.tokens import Encoding, TokenCounter
from cairn.actors.tools import ToolExecutor, ToolInvocation, ToolOutcome, check_outcome
from cairn.events.codec import Record
from cairn.events.errors import CairnError, InvalidEvent, LineTooLarge, MalformedEvent
from cairn.events.kinds import EventBase, FailedPhase, Trigger
from cairn.events.model import Message, ToolCall
from cairn.events.state import SessionState, replay
from cairn.store.errors import SeqConflict
from cairn.store.journal import Journal

log = logging.getLogger("cairn.session")


# --- what the host gives every session ------------------------------------------------------


@dataclass(frozen=True)
class Runtime:
    """The host's dependencies and settings, shared by all its sessions (read-only)."""

    journal: Journal
    adapter_for: Callable[[str], Provider]
    tools: ToolExecutor | None
    clock_ms: Callable[[], int]
    sleep: Callable[[float], None]
    hook: PreCompactionHook | None = None
    compaction: CompactionConfig | None = None
    encoding: Encoding | None = None
    request_timeout_s: float | None = None
    max_requests_per_turn: int = 64
    #: transient provider errors before any output: how often a turn's request is sent again
    turn_retries: int = 2
    #: the waits before those retries and the summary calls' (C5 floor, `Retry-After`, cap, jitter)
    retry: RetryPolicy = RetryPolicy()  # noqa: RUF009 (immutable, safe to share)
    #: a random number in [0, 1) for the jitter of a hinted wait
    retry_draw: Callable[[], float] = random.random
    append_timeout_s: float = 30.0
    stop_timeout_s: float = 10.0


# --- messages ---------------------------------------------------------------------------------


class Load:
    """Ask: replay the session from the log (marking an interrupted turn); answers its last seq."""

    __slots__ = ()


class RetryRequest:
    """Tell (from a timer thread): the wait after a transient provider error is over."""

    __slots__ = ("token", "turn_id")

    def __init__(self, turn_id: str, token: int) -> None:
        self.turn_id = turn_id
        self.token = token


class Send:
    """Tell: a user message for the session; its handle reports the turn it starts or steers."""

    __slots__ = ("handle", "settings", "text", "workspace")

    def __init__(
        self, text: UserContent, handle: Turn, *, workspace: str | None, settings: SessionSettings
    ) -> None:
        self.text = text  # a string, or the parts of a message with images
        self.handle = handle
        self.workspace = workspace
        self.settings = settings


class ManualCompact:
    """Tell: K4 compaction; `reply` gets the checkpoint's record, None when not due, or the error."""

    __slots__ = ("reply",)

    def __init__(self, reply: concurrent.futures.Future[Record | None]) -> None:
        self.reply = reply


class Query:
    """Ask: `state` (the SessionState) or `next-request` (the AssembledRequest it would send now)."""

    __slots__ = ("what",)

    def __init__(self, what: Literal["state", "next-request"]) -> None:
        self.what = what


# --- in-flight bookkeeping -----------------------------------------------------------------------


class _Run:
    """The turn this actor is driving, and the request it waits for."""

    def __init__(self, turn_id: str, handles: list[Turn]) -> None:
        self.turn_id = turn_id
        self.handles = handles
        self.requests = 0
        self.attempt = 1
        self.transient_retries = 0  # sends again after a transient provider error (turn_retries)
        self.handoff_failed = False  # H7: no second try in this turn
        self.text = ""
        self.provider_seconds = 0.0
        self.tool_chars = 0  # X2: chars of the current tool turn's results shown
        self.job = 0
        self.request_id = ""
        self.cancel = threading.Event()
        self.begin(0, "")

    def begin(self, job: int, request_id: str) -> None:
        self.job = job
        self.request_id = request_id
        self.cancel = threading.Event()
        self.text_parts: list[str] = []
        self.reasoning_parts: list[str] = []
        self.calls: list[ToolCall] = []
        self.usage: UsageReport | None = None
        self.finish: str | None = None
        self.delivered = False


class _Compaction:
    """A compaction asked of the compactor actor and not answered yet."""

    def __init__(
        self,
        job: int,
        trigger: Trigger,
        *,
        snipped: tuple[Message, ...] | None = None,
        reply: concurrent.futures.Future[Record | None] | None = None,
        overflow: ProviderFailed | None = None,
    ) -> None:
        self.job = job
        self.trigger = trigger
        self.snipped = snipped
        self.reply = reply
        self.overflow = overflow  # R3: the provider error a reactive compaction answers


class SessionActor(pykka.ThreadingActor):
    """One conversation's turn loop (see the module doc). Started, loaded and stopped by the host."""

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
        self._run: _Run | None = None
        self._compaction: _Compaction | None = None
        self._sends: list[Send] = []
        self._manual: list[ManualCompact] = []
        self._jobs = itertools.count(1)

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
        """Resolve messages still queued in a crashed actor's inbox (pykka would drop tells)."""
        inbox = self.actor_inbox
        while not inbox.empty():
            envelope = inbox.get()
            message = envelope.message
            if isinstance(message, Send):
                message.handle._finish(self._result("rejected", "", error_class="SessionCrashed",
                                                    error="the session crashed; send again"))
            elif isinstance(message, ManualCompact):
                _set_exception(message.reply, SessionCrashed(f"session {self._sid} crashed; try again"))
            elif envelope.reply_to is not None:
                with contextlib.suppress(Exception):
                    envelope.reply_to.set_exception(
                        exc_info=(SessionCrashed, SessionCrashed(f"session {self._sid} crashed"), None)
                    )

    # -- dispatch -------------------------------------------------------------------------------

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Load):
            return self._load()
        if isinstance(message, Query):
            return self._query(message)
        try:
            if isinstance(message, ProviderItem):
                self._on_item(message)
            elif isinstance(message, ProviderDone):
                self._on_done(message)
            elif isinstance(message, ProviderFailed):
                self._on_failed(message)
            elif isinstance(message, CompactionDone):
                self._on_compaction(message)
            elif isinstance(message, Send):
                self._on_send(message)
            elif isinstance(message, ManualCompact):
                self._on_manual(message)
            elif isinstance(message, RetryRequest):
                self._on_retry(message)
        except Exception as exc:
            # named by its id (ids are validated safe to print), so an operator can find it
            # with `cairn log`; only H7's hand-off lines name a session by a hash
            log.error("cairn: session %r crashed on %s: %s", self._sid, type(message).__name__,
                      describe_exception(exc))
            # dead before anyone hears of it: a message sent after the failed turn's result
            # finds this actor stopped, and the host rebuilds the session by replay
            self.actor_stopped.set()
            self._abandon(f"the session crashed ({type(exc).__name__})", persist=False,
                          error_class=type(exc).__name__)
            raise
        return None

    def _load(self) -> int:
        """Replay from the log; owe the log an `interrupted` end for a turn that never ended.

        Also starts the provider actor, here rather than in `on_start`, so a
        failure reaches the host that asked instead of silently stopping us.
        """
        if self._provider is None:
            self._adapter = self._rt.adapter_for(self._sid)
            self._provider = ProviderActor.start(self._adapter)
        state = self._journal.load(self._sid)
        owed = interrupted_events(state, "the turn never finished: the process stopped or crashed")
        if owed:
            records = self._journal.append(
                self._sid, owed, expected_seq=state.last_seq, timeout=self._rt.append_timeout_s
            )
            state = replay(records, state)
        self._state = state
        self._view.sync(state)
        self._loaded = True
        return state.last_seq

    def _query(self, query: Query) -> Any:
        if query.what == "state":
            return self._state
        return self._assemble()

    def _assemble(self) -> AssembledRequest:
        return assemble(self._state, self._view)

    # -- persisting ---------------------------------------------------------------------------

    def _persist(self, events: Sequence[EventBase]) -> list[Record]:
        """Append, wait for the acknowledgement, then apply and publish (persist, then apply)."""
        try:
            records = self._journal.append(
                self._sid, events, expected_seq=self._state.last_seq, timeout=self._rt.append_timeout_s
            )
        except SeqConflict:
            # someone else wrote this session: take the log's word for it before failing
            self._state = self._journal.load(self._sid)
            raise
        self._state = replay(records, self._state)
        run = self._run
        if run is not None:
            for record in records:
                if not is_hidden_event(record.event):  # H6: never in the client stream
                    for handle in run.handles:
                        handle._publish(record)
        return records

    def _try_persist(self, events: Sequence[EventBase], phase: FailedPhase) -> bool:
        """Persist, or fail the turn in `phase` when the journal refuses (memory unchanged)."""
        try:
            self._persist(events)
        except CairnError as exc:
            self._fail(phase, type(exc).__name__, str(exc))
            return False
        return True

    # -- starting and steering ------------------------------------------------------------------

    def _on_send(self, message: Send) -> None:
        if self._run is not None or self._compaction is not None:
            self._sends.append(message)  # recorded before the next request, or after this wait
            return
        self._start([message])

    def _accept(self, sends: list[Send]) -> list[Send]:
        """The sends this session can take; the others are rejected on their handles.

        A new session takes the workspace of its first message that names one;
        every later message must name the same one, or none.
        """
        info = self._state.info
        workspace = info.workspace if info is not None else None
        accepted: list[Send] = []
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
            if workspace is None:
                workspace = send.workspace
            accepted.append(send)
        return accepted

    def _start(self, sends: list[Send]) -> None:
        if not self._loaded:
            self._load()
        accepted = self._accept(sends)
        if not accepted:
            return self._resume()
        first = next((send for send in accepted if send.workspace is not None), accepted[0])
        try:
            events, turn_id = start_events(
                self._state,
                [send.text for send in accepted],
                settings=first.settings,
                workspace=first.workspace,
            )
            self._run = _Run(turn_id, [send.handle for send in accepted])
            self._persist(events)
        except CairnError as exc:
            self._run = None
            result = self._result("rejected", "", error_class=type(exc).__name__, error=str(exc))
            for send in accepted:
                send.handle._finish(result)
            return self._resume()
        self._next_request()

    def _steer(self) -> bool:
        """Record the messages that arrived during the turn; False when the turn failed doing it."""
        run = self._run
        assert run is not None
        sends = self._accept(self._sends)
        self._sends = []
        if not sends:
            return True
        run.handles.extend(send.handle for send in sends)
        return self._try_persist(steering_events(self._state, [send.text for send in sends]), "provider")

    # -- before each request (L1, H) --------------------------------------------------------------

    def _next_request(self) -> None:
        run = self._run
        assert run is not None
        if not self._steer():
            return
        if run.requests >= self._rt.max_requests_per_turn:
            return self._fail("provider", "too-many-requests",
                              f"the turn made {run.requests} requests without the model finishing")
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
        run = self._run
        assert run is not None
        state = self._state
        try:
            handoff = decide_handoff(state, occ.snapshot, now_ms=self._rt.clock_ms(),
                                     write_failed=run.handoff_failed)  # L1 (5), H1
        except InvalidHandoff as exc:
            self._handoff_failed(exc)
            handoff = None
        if handoff is not None:
            try:
                self._persist([handoff])  # H6: durable before the request that carries it
            except CairnError as exc:
                self._handoff_failed(exc)
            else:
                occ = occupancy(self._state, self._view)
        assembled = assemble(self._state, self._view, occ=occ)
        request_id = f"r{self._state.last_seq + 1}"
        event = request_event(assembled, request_id=request_id, turn_id=run.turn_id, attempt=run.attempt)
        if not self._try_persist([event], "provider"):
            return
        run.requests += 1
        run.begin(next(self._jobs), request_id)
        info = self._state.info
        request = ProviderRequest(
            model=assembled.model,
            messages=inline_image_blobs(assembled.messages, self._rt.journal.read_blob),
            tools=assembled.tools,
            purpose="turn",
            max_output_tokens=info.max_output_tokens if info is not None else None,
            timeout_s=self._rt.request_timeout_s,
            request_id=request_id,
        )
        provider = self._provider
        try:
            if provider is None:
                raise pykka.ActorDeadError("no provider actor")
            provider.tell(StreamJob(run.job, request, self.actor_ref, run.cancel))
        except pykka.ActorDeadError:
            self._fail("provider", "ActorDeadError", "the provider actor is gone")

    def _handoff_failed(self, exc: BaseException) -> None:
        """H7: one line naming the session by a hash and the error class; no retry this turn."""
        log.warning(handoff_failure_line(self._sid, exc))
        assert self._run is not None
        self._run.handoff_failed = True

    # -- compaction (L1 step 4, R3, K4) ------------------------------------------------------------

    def _compactor_ref(self) -> pykka.ActorRef[Any]:
        if self._compactor is None or not self._compactor.is_alive():
            info = self._state.info
            assert self._adapter is not None
            compactor = Compactor(
                self._adapter,
                model=info.model if info is not None else "",
                sleep=self._rt.sleep,
                counter=self._counter,
                hook=self._rt.hook,
                config=self._rt.compaction,
                retry=self._rt.retry,
                draw=self._rt.retry_draw,
            )
            self._compactor = CompactorActor.start(compactor)
        return self._compactor

    def _compact(
        self,
        trigger: Trigger,
        *,
        source: tuple[Message, ...] | None,
        snipped: tuple[Message, ...] | None = None,
        reply: concurrent.futures.Future[Record | None] | None = None,
        overflow: ProviderFailed | None = None,
    ) -> None:
        state = self._state
        info = state.info
        assert info is not None
        job = next(self._jobs)
        request = CompactionRequest(
            state=state, workspace=info.workspace, trigger=trigger, now_ms=self._rt.clock_ms(), source=source
        )
        self._compaction = _Compaction(job, trigger, snipped=snipped, reply=reply, overflow=overflow)
        self._compactor_ref().tell(CompactJob(job, request, self.actor_ref))

    def _on_compaction(self, done: CompactionDone) -> None:
        pending = self._compaction
        if pending is None or done.job != pending.job:
            return  # an answer nobody waits for any more
        self._compaction = None
        if pending.trigger == "manual":
            self._manual_done(pending, done)
            return self._resume()
        if self._run is None:
            return self._resume()
        if done.blocked is not None:  # C3 / R4: the context stays as it was, no checkpoint
            blocked = done.blocked
            with contextlib.suppress(CairnError):
                self._persist([blocked.event])  # for audit; the breaker ignores it
            return self._fail("compaction", "blocked", blocked.reason)
        if done.outcome is None:
            error = done.error or RuntimeError("no outcome")
            if not self._record_failures(error):
                return
            detail = f"{type(error).__name__}: {error}"
            if pending.trigger != "reactive":
                if isinstance(error, CompactionIneffective):  # nothing smaller to swap in (L2)
                    return self._fail("compaction", "insufficient-reduction", str(error))
                return self._fail("compaction", type(error).__name__, detail)
            checkpoint = None
            if pending.snipped is not None:
                checkpoint = snip_checkpoint(self._state, pending.snipped, self._counter, detail=detail)
            if checkpoint is None:  # R3: nothing smaller; the provider's error stands
                why = error.reason if isinstance(error, CompactionIneffective) else detail
                return self._recovery_failed(pending, why)
            return self._after_checkpoint([checkpoint], reactive=True)
        self._after_checkpoint(list(done.outcome.events), reactive=pending.trigger == "reactive")

    def _record_failures(self, error: BaseException) -> bool:
        """Persist the `compaction-failed` records of a compaction that committed nothing (C4)."""
        if not isinstance(error, CompactionIneffective) or not error.events:
            return True
        return self._try_persist(list(error.events), "compaction")

    def _recovery_failed(self, pending: _Compaction, why: str) -> None:
        """R3: neither compaction nor snip gave a smaller context; fail with the original error."""
        original = pending.overflow
        error_class = original.error_class if original is not None else "context-limit"
        message = original.message if original is not None else "the context is over the provider's limit"
        detail = f"{message} (reactive recovery could not shrink the context: {why})"
        self._fail("provider", error_class, detail)

    def _after_checkpoint(self, events: list[EventBase], *, reactive: bool) -> None:
        """K2: the checkpoint is acknowledged before memory changes and before any request."""
        if not self._try_persist(events, "checkpoint"):
            return
        run = self._run
        assert run is not None
        if reactive:
            run.attempt += 1  # R3: the same request, replayed on the new context
        self._send_request(occupancy(self._state, self._view))  # L1 (5) onwards

    # -- the provider's answer -----------------------------------------------------------------

    def _current(self, job: int) -> _Run | None:
        run = self._run
        if run is None or run.job != job or job == 0:
            return None
        return run

    def _on_item(self, message: ProviderItem) -> None:
        run = self._current(message.job)
        if run is None:
            return
        run.delivered = True  # R2: output crossed the boundary
        item = message.item
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
        elif isinstance(item, UsageReport):
            run.usage = item
        elif isinstance(item, Finished):
            run.finish = item.reason

    def _on_done(self, message: ProviderDone) -> None:
        run = self._current(message.job)
        if run is None:
            return
        run.job = 0
        run.provider_seconds += message.seconds
        text = "".join(run.text_parts)
        events = response_events(
            self._state,
            request_id=run.request_id,
            text=text,
            reasoning="".join(run.reasoning_parts),
            calls=run.calls,
            usage=run.usage,
            finish_reason=run.finish,
        )
        calls = unique_calls(run.calls)
        run.text = text or run.text
        if not calls and not self._sends:
            events.append(completion_event(run.turn_id, run.requests))
            if self._try_persist(events, "provider"):
                self._finish("completed")
            return
        if not self._try_persist(events, "provider"):
            return
        run.tool_chars = 0
        for call in calls:
            if not self._record_tool(call, self._run_tool(call, run), run):
                return
        self._next_request()

    def _record_tool(self, call: ToolCall, outcome: ToolOutcome, run: _Run) -> bool:
        """Persist one call's result; an outcome the log refuses (too large) becomes an error result.

        False when the turn failed (phase `tool`): the journal could not write.
        """
        read_only = read_only_tools(self._state.info)
        result, used = tool_result_event(call, outcome, read_only=read_only, used=run.tool_chars)
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

    def _run_tool(self, call: ToolCall, run: _Run) -> ToolOutcome:
        """The host's executor for one call, checked; whatever goes wrong is an error result the model sees.

        Even a BaseException (KeyboardInterrupt, SystemExit) the tool raises
        is one: let through, pykka would stop every actor of the process.
        """
        tools = self._rt.tools
        info = self._state.info
        if tools is None or info is None:
            return error_outcome(f"no tool named {call.name!r} is available")
        invocation = ToolInvocation(
            session=self._sid, workspace=info.workspace, turn_id=run.turn_id, call=call
        )
        try:
            value = tools(invocation)
        except BaseException as exc:
            if not isinstance(exc, Exception):
                log.warning("cairn: session %r: the tool %r raised %s; recorded as its error result",
                            self._sid, call.name, type(exc).__name__)
            return error_outcome(f"the tool {call.name!r} failed: {describe_exception(exc)}")
        outcome = check_outcome(value)
        if isinstance(outcome, str):
            return error_outcome(f"the tool {call.name!r} {outcome}")
        return outcome

    def _on_failed(self, message: ProviderFailed) -> None:
        """A provider error: record it, then retry, recover or fail as `turn.provider_failure` says."""
        run = self._current(message.job)
        if run is None:
            return
        run.job = 0
        run.provider_seconds += message.seconds
        decision = provider_failure(
            self._state,
            message,
            turn_id=run.turn_id,
            request_id=run.request_id,
            delivered=run.delivered,
            retries_done=run.transient_retries,
            retries_allowed=self._rt.turn_retries,
            draw=self._rt.retry_draw(),
            policy=self._rt.retry,
        )
        match decision.verdict:
            case RetryAfter(wait_ms):
                if self._try_persist(decision.events, "provider"):
                    self._retry_later(run, wait_ms)
            case Recover():
                if self._try_persist(decision.events, "provider"):
                    self._recover(message)
            case Fail() | FailClosed():
                with contextlib.suppress(CairnError):
                    self._persist(decision.events)
                self._finish("failed", "provider", message.error_class, decision.detail)

    def _retry_later(self, run: _Run, wait_ms: int) -> None:
        """Send the turn's request again after `wait_ms`, without blocking this actor."""
        delay_s = wait_ms / 1000
        run.transient_retries += 1
        run.attempt += 1
        run.job = next(self._jobs)  # the token the timer must bring back
        message = RetryRequest(run.turn_id, run.job)
        ref, sleep = self.actor_ref, self._rt.sleep

        def wake() -> None:
            sleep(delay_s)
            with contextlib.suppress(pykka.ActorDeadError):
                ref.tell(message)

        threading.Thread(target=wake, name=f"cairn-retry-{run.turn_id}", daemon=True).start()

    def _on_retry(self, message: RetryRequest) -> None:
        run = self._run
        if run is None or run.turn_id != message.turn_id or run.job != message.token:
            return  # the turn ended (or moved on) meanwhile
        run.job = 0
        self._next_request()  # L1 runs again: time has passed

    def _recover(self, overflow: ProviderFailed) -> None:
        """R3: strip the hand-off, snip keep 3 minimum 10, compact the result (trigger reactive)."""
        snipped = recovery_source(self._state, self._view, self._counter, now_ms=self._rt.clock_ms())
        self._compact("reactive", source=snipped, snipped=snipped, overflow=overflow)

    # -- manual compaction (K4) -------------------------------------------------------------------

    def _on_manual(self, message: ManualCompact) -> None:
        if self._run is not None or self._compaction is not None:
            self._manual.append(message)  # after the turn
            return
        self._manual_start(message)

    def _manual_start(self, message: ManualCompact) -> None:
        if not self._loaded:
            self._load()
        state = self._state
        if state.info is None:
            _set_exception(message.reply, UnknownSession(f"no session {self._sid} in the store"))
            return self._resume()
        occ = occupancy(state, self._view)
        if not manual_compaction_due(occ.projection.tokens, state.info.context_window):
            _set_result(message.reply, None)
            return self._resume()
        self._compact("manual", source=None, reply=message.reply)

    def _manual_done(self, pending: _Compaction, done: CompactionDone) -> None:
        reply = pending.reply
        assert reply is not None
        if done.blocked is not None:
            with contextlib.suppress(CairnError):
                self._persist([done.blocked.event])
            _set_exception(reply, done.blocked)  # C3: the caller gets the error
            return
        if done.outcome is None:
            error = done.error or RuntimeError("no outcome")
            if isinstance(error, CompactionIneffective) and error.events:
                with contextlib.suppress(CairnError):  # the breaker counts them (C4)
                    self._persist(list(error.events))
            _set_exception(reply, error)
            return
        try:
            records = self._persist(list(done.outcome.events))
        except CairnError as exc:
            _set_exception(reply, exc)
            return
        _set_result(reply, records[-1])

    # -- ending ------------------------------------------------------------------------------------

    def _result(self, status: TurnStatus, phase: FailedPhase | Literal[""] | None, *,
                error_class: str = "", error: str = "", run: _Run | None = None) -> TurnResult:
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
            log.warning("cairn: session %r: the failed turn could not be recorded (%s); it is marked "
                        "interrupted when the session is next loaded", self._sid,
                        describe_exception(exc))
        self._finish("failed", phase, error_class, error)

    def _finish(self, status: TurnStatus, phase: FailedPhase | None = None, error_class: str = "",
                error: str = "") -> None:
        run = self._run
        result = self._result(status, phase, error_class=error_class, error=error, run=run)
        self._run = None
        if run is not None:
            run.cancel.set()
            for handle in run.handles:
                handle._finish(result)
        self._resume()

    def _resume(self) -> None:
        """Idle again: run a waiting manual compaction, else start a turn with the waiting messages."""
        if self._run is not None or self._compaction is not None:
            return
        if self._manual:
            return self._manual_start(self._manual.pop(0))
        if self._sends:
            sends, self._sends = self._sends, []
            self._start(sends)

    def _abandon(self, reason: str, *, persist: bool, error_class: str = "interrupted") -> None:
        """Resolve everything in flight (stop or crash): no handle or reply is left hanging."""
        run = self._run
        if run is not None:
            run.cancel.set()
            if persist:
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
            _set_exception(manual.reply, stopped)
        self._manual = []
        pending = self._compaction
        self._compaction = None
        if pending is not None and pending.reply is not None:
            _set_exception(pending.reply, stopped)


def _set_result(future: concurrent.futures.Future[Record | None], value: Record | None) -> None:
    with contextlib.suppress(concurrent.futures.InvalidStateError):
        future.set_result(value)


def _set_exception(future: concurrent.futures.Future[Record | None], error: BaseException) -> None:
    with contextlib.suppress(concurrent.futures.InvalidStateError):
        future.set_exception(error)
