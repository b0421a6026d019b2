"""The session's modes and the moves between them: pure, the turn loop as one state machine.

Between two of its messages a session actor is always in one of these modes
(`Preparing` lasts only while one message is handled):

| mode                 | waits for                                          | a turn runs     |
|----------------------|----------------------------------------------------|-----------------|
| `Idle`               | a message from the host                            | no              |
| `Preparing`          | nothing: L1, the hand-off and the request are made | yes             |
| `AwaitingProvider`   | the answer to request `request_id` (job `job`)     | yes             |
| `AwaitingTools`      | the result of `calls[answered]` of job `job`       | yes             |
|                      | (`deferred`: from outside; a load may resume it)   |                 |
| `AwaitingRetry`      | the end of a transient error's wait (job `job`)    | yes             |
| `AwaitingCompaction` | the compactor's answer to job `job`                | unless manual   |

`step(mode, happened)` is the whole table of moves: what each input does in
each mode, as `match` arms, and the effects the actor carries out, in
order. An input that belongs to an earlier wait (its job is not the one
awaited: a turn that moved on, a stale timer, a result of a call already
answered) changes nothing and asks for nothing.

The actor (`turn_loop`) is the shell: it turns its messages into these
inputs, carries out the effects (appending events, calling the provider,
running a tool, starting a timer) and feeds what they lead to back in
(`RequestSent`, `CompactionAsked`, `TurnEnded`). Persist, then apply still
holds inside each effect: an effect that records events and fails ends the
turn (its phase, `turn.py`), and the effects after it are not carried out.

Tool results come back as inputs like the provider's answers, so a result
may come from another thread, or later from a client, without the actor
blocking on it; while it waits, host messages queue (steering, C11).

While `Preparing`, `preparing.before_request` is L1's table: the next
thing to do before the request (the request limit, micro-slim, snip,
compaction, the hand-off, the request itself).
"""

# long: every mode, input and effect of the session in one place, with the table of moves

from __future__ import annotations

from typing import Literal

import msgspec

from cairn.actors.session.verdict import Fail, FailClosed, ProviderVerdict, Recover, RetryAfter
from cairn.events.kinds import Trigger
from cairn.events.model import ToolCall

# --- modes ----------------------------------------------------------------------------------------


class Idle(msgspec.Struct, frozen=True):
    """No turn runs and nothing is awaited: the next host message is taken at once."""


class Preparing(msgspec.Struct, frozen=True):
    """A turn runs and its next step is being made (only within one message's handling)."""


class AwaitingProvider(msgspec.Struct, frozen=True):
    """The turn's request `request_id` went to the provider actor as job `job`."""

    job: int
    request_id: str


class AwaitingTools(msgspec.Struct, frozen=True):
    """The response of job `job` called tools; `calls[answered]` runs, the ones after it wait.

    `deferred`: that call's executor deferred its result (`tools.Deferred`):
    it comes from the host (`ToolResolved`), or a timeout's error does."""

    job: int
    calls: tuple[ToolCall, ...]
    answered: int = 0
    deferred: bool = False


class AwaitingRetry(msgspec.Struct, frozen=True):
    """Job `job` failed transiently (C5); the same request goes again after `wait_ms`."""

    job: int
    wait_ms: int


class AwaitingCompaction(msgspec.Struct, frozen=True):
    """The compactor works on job `job`; a manual one runs outside any turn (K4)."""

    job: int
    trigger: Trigger


Mode = Idle | Preparing | AwaitingProvider | AwaitingTools | AwaitingRetry | AwaitingCompaction


def turn_runs(mode: Mode) -> bool:
    """Whether a turn runs in `mode`."""
    match mode:
        case Idle():
            return False
        case AwaitingCompaction(trigger=trigger):
            return trigger != "manual"
        case Preparing() | AwaitingProvider() | AwaitingTools() | AwaitingRetry():
            return True


# --- inputs: what happened --------------------------------------------------------------------------


MidTurn = Literal["steer", "queue", "reject", "interrupt"]
"""What a user message sent while a turn runs does (`Host.send(..., mid_turn=)`):

- `steer`: it joins the running turn, recorded before its next request (C11);
- `queue`: it waits for the turn's end and starts the next turn;
- `reject`: it is refused (`rejected`, error class `TurnRunning`), nothing recorded;
- `interrupt`: the running turn is cancelled (`turn-cancelled`), then it starts the next.
"""


HostKind = Literal["send", "compact", "continue", "dismiss"]


class HostMessage(msgspec.Struct, frozen=True):
    """The host sent a user message (`send`, with its `mid_turn` policy), asked for a manual
    compaction (`compact`), to continue an interrupted turn (`continue`) or to dismiss one
    (`dismiss`)."""

    kind: HostKind
    mid_turn: MidTurn = "steer"


class CancelAsked(msgspec.Struct, frozen=True):
    """The host cancelled the running turn (`Turn.cancel` on one of its handles)."""


class TurnStarting(msgspec.Struct, frozen=True):
    """The actor opens a turn with the messages it took."""


class RequestSent(msgspec.Struct, frozen=True):
    """The turn's request is on disk and went to the provider actor as job `job`."""

    job: int
    request_id: str


class Streamed(msgspec.Struct, frozen=True):
    """An item of job `job`'s response (a delta, a call, the usage) reached the actor."""

    job: int


class ResponseEnded(msgspec.Struct, frozen=True):
    """Job `job`'s response is complete: its tool calls (unique ids), whether a host message waits."""

    job: int
    calls: tuple[ToolCall, ...]
    steering_waits: bool


class ProviderErred(msgspec.Struct, frozen=True):
    """Job `job` failed: the provider actor reported an error."""

    job: int


class ErrorJudged(msgspec.Struct, frozen=True):
    """The error of job `job` was judged: `verdict` is `turn.provider_verdict`'s."""

    job: int
    verdict: ProviderVerdict


class ToolEnded(msgspec.Struct, frozen=True):
    """The call at `index` of job `job`'s tool calls has an outcome."""

    job: int
    index: int


class ToolWaits(msgspec.Struct, frozen=True):
    """The executor deferred the result of the call at `index` of job `job`'s calls."""

    job: int
    index: int


class WaitResumed(msgspec.Struct, frozen=True):
    """Loading found the log's open turn waiting for the deferred result of `calls[answered]`
    (`deferred.deferred_wait`): the wait goes on, as job `job`."""

    job: int
    calls: tuple[ToolCall, ...]
    answered: int


class ToolResolved(msgspec.Struct, frozen=True):
    """The host posted the result of call `call_id` (`Host.resolve_tool`)."""

    call_id: str


class RetryDue(msgspec.Struct, frozen=True):
    """The wait of a transient error of job `job` is over."""

    job: int


class CompactionAsked(msgspec.Struct, frozen=True):
    """The actor asked its compactor for a compaction (`trigger`) as job `job`."""

    job: int
    trigger: Trigger


class CompactionEnded(msgspec.Struct, frozen=True):
    """The compactor answered job `job`."""

    job: int


class TurnEnded(msgspec.Struct, frozen=True):
    """The turn completed or failed (or never started); its handles have their result."""


class Stopped(msgspec.Struct, frozen=True):
    """The actor stops or crashed: whatever it awaited is abandoned, nothing more is taken."""


Happened = (
    HostMessage
    | CancelAsked
    | TurnStarting
    | RequestSent
    | Streamed
    | ResponseEnded
    | ProviderErred
    | ErrorJudged
    | ToolEnded
    | ToolWaits
    | WaitResumed
    | ToolResolved
    | RetryDue
    | CompactionAsked
    | CompactionEnded
    | TurnEnded
    | Stopped
)


# --- effects: what the actor must do, in order -----------------------------------------------------


class Take(msgspec.Struct, frozen=True):
    """Handle the host's message now: start a turn (`send`, `continue`), a manual compaction
    (`compact`), or record a dismissal (`dismiss`)."""

    kind: HostKind


class Queue(msgspec.Struct, frozen=True):
    """Keep the host's message for later: steering before the next request, or after the wait."""

    kind: Literal["send", "compact"]


class Refuse(msgspec.Struct, frozen=True):
    """Refuse the host's message (`TurnRunning`): a user message sent with `mid_turn="reject"`, or
    a `continue` or `dismiss`, which only an idle session takes."""

    kind: HostKind = "send"


class CancelTurn(msgspec.Struct, frozen=True):
    """End the running turn as cancelled: close its open calls, record `turn-cancelled`."""


class TakeItem(msgspec.Struct, frozen=True):
    """Add the streamed item to the response being read (and pass deltas to the turn's handles)."""


class RecordResponse(msgspec.Struct, frozen=True):
    """Append the assistant message and its usage, with `turn-completed` when `completes`."""

    completes: bool


class RunTool(msgspec.Struct, frozen=True):
    """Run `call` (the one at `index` of job `job`'s calls); its outcome comes back as `ToolEnded`."""

    job: int
    index: int
    call: ToolCall


class WaitForResult(msgspec.Struct, frozen=True):
    """Start the deferred call's timeout: after it, an error outcome comes back as `ToolEnded`."""

    job: int
    index: int


class ResumeWait(msgspec.Struct, frozen=True):
    """Start a resumed wait's timeout with the time it has left (nothing is recorded again)."""

    job: int
    index: int


class AcceptResult(msgspec.Struct, frozen=True):
    """Tell `Host.resolve_tool` its result was taken (recorded next)."""


class RefuseResult(msgspec.Struct, frozen=True):
    """Tell `Host.resolve_tool` no such call waits for a result (`ToolNotWaiting`): nothing changes."""


class RecordTool(msgspec.Struct, frozen=True):
    """Append the result of `call` (the one whose outcome just came back)."""

    call: ToolCall


class NextRequest(msgspec.Struct, frozen=True):
    """Steering messages, L1, the hand-off, then the next request (or the turn's end)."""


class JudgeError(msgspec.Struct, frozen=True):
    """Judge the provider's error (`turn.provider_failure`) and report `ErrorJudged`."""


class RecordError(msgspec.Struct, frozen=True):
    """Append the `provider-error` (and for a failure the turn's closing events)."""


class WaitThenRetry(msgspec.Struct, frozen=True):
    """Start a timer that reports `RetryDue(job)` after `wait_ms`."""

    job: int
    wait_ms: int


class RecoverContext(msgspec.Struct, frozen=True):
    """R3: ask for a reactive compaction of the context the provider refused."""


class EndTurn(msgspec.Struct, frozen=True):
    """The turn has ended (completed, or failed as the verdict said): resolve its handles."""

    status: Literal["completed", "failed"]


class TakeCompaction(msgspec.Struct, frozen=True):
    """Carry out the compactor's answer (the table in `compacting`)."""

    trigger: Trigger


class Resume(msgspec.Struct, frozen=True):
    """Idle again: take what waited (a manual compaction first, then the queued messages)."""


Effect = (
    Take
    | Queue
    | Refuse
    | CancelTurn
    | TakeItem
    | RecordResponse
    | RunTool
    | WaitForResult
    | ResumeWait
    | AcceptResult
    | RefuseResult
    | RecordTool
    | NextRequest
    | JudgeError
    | RecordError
    | WaitThenRetry
    | RecoverContext
    | EndTurn
    | TakeCompaction
    | Resume
)

Step = tuple[Mode, tuple[Effect, ...]]


def step(mode: Mode, happened: Happened) -> Step:
    """The mode after `happened`, and the effects to carry out, in order (the module doc)."""
    # long: the table of moves: one match arm per input in each mode
    match happened, mode:
        # the host's messages: taken when idle, else kept for later
        case HostMessage(kind), Idle():
            return mode, (Take(kind),)
        case HostMessage("send", mid_turn), _ if turn_runs(mode):
            return _mid_turn(mode, mid_turn)
        case HostMessage("send"), _:
            return mode, (Queue("send"),)
        case HostMessage("compact"), _:
            return mode, (Queue("compact"),)
        case HostMessage(kind), _:
            return mode, (Refuse(kind),)
        case CancelAsked(), _ if turn_runs(mode):
            return Preparing(), (CancelTurn(),)
        case CancelAsked(), _:
            return mode, ()  # no turn runs: nothing to cancel
        # the actor's own moves
        case TurnStarting(), Idle():
            return Preparing(), ()
        case RequestSent(job, request_id), Preparing():
            return AwaitingProvider(job, request_id), ()
        case CompactionAsked(job, trigger), Preparing() if trigger != "manual":
            return AwaitingCompaction(job, trigger), ()
        case CompactionAsked(job, "manual"), Idle():
            return AwaitingCompaction(job, "manual"), ()
        case TurnEnded(), _:
            return Idle(), (Resume(),)
        case Stopped(), _:
            return Idle(), ()
        # the provider's answer to the awaited request
        case Streamed(job), AwaitingProvider(awaited) if job == awaited:
            return mode, (TakeItem(),)
        case ResponseEnded(job, calls, steering), AwaitingProvider(awaited) if job == awaited:
            return _after_response(job, calls, steering_waits=steering)
        case ProviderErred(job), AwaitingProvider(awaited) if job == awaited:
            return Preparing(), (JudgeError(),)
        case ErrorJudged(job, verdict), Preparing():
            return _after_error(job, verdict)
        # the tools of a response, one at a time, in their order
        case ToolEnded(job, index), AwaitingTools(awaited, calls, answered) if (job, index) == (
            awaited,
            answered,
        ):
            return _after_tool(job, calls, answered)
        case ToolWaits(job, index), AwaitingTools(awaited, calls, answered, False) if (job, index) == (
            awaited,
            answered,
        ):
            return AwaitingTools(job, calls, answered, True), (WaitForResult(job, index),)
        case WaitResumed(job, calls, answered), Idle():
            return AwaitingTools(job, calls, answered, True), (ResumeWait(job, answered),)
        case ToolResolved(call_id), AwaitingTools(job, calls, answered, True) if (
            calls[answered].id == call_id
        ):
            following, effects = _after_tool(job, calls, answered)
            return following, (AcceptResult(), *effects)
        case ToolResolved(), _:
            return mode, (RefuseResult(),)
        case RetryDue(job), AwaitingRetry(awaited) if job == awaited:
            return Preparing(), (NextRequest(),)
        case CompactionEnded(job), AwaitingCompaction(awaited, trigger) if job == awaited:
            if trigger == "manual":
                return Idle(), (TakeCompaction(trigger), Resume())
            return Preparing(), (TakeCompaction(trigger),)
        # an answer nobody waits for any more
        case (
            (
                Streamed()
                | ResponseEnded()
                | ProviderErred()
                | ToolEnded()
                | ToolWaits()
                | RetryDue()
                | CompactionEnded()
            ),
            _,
        ):
            return mode, ()
        case _:
            # a bug in the actor, never something a host can cause
            raise AssertionError(f"{type(happened).__name__} cannot happen while {type(mode).__name__}")


def _mid_turn(mode: Mode, policy: MidTurn) -> Step:
    """A user message while a turn runs, as its `mid_turn` policy says (the table at `MidTurn`).

    A queued message that is not steering waits in the same queue and starts
    the next turn; for `interrupt` it is queued first, so the turn's end
    (`Resume`) finds it.
    """
    match policy:
        case "steer" | "queue":
            return mode, (Queue("send"),)
        case "reject":
            return mode, (Refuse(),)
        case "interrupt":
            return Preparing(), (Queue("send"), CancelTurn())


def _after_tool(job: int, calls: tuple[ToolCall, ...], answered: int) -> Step:
    """The call at `answered` has its result: record it, then the next call, or the next request."""
    recorded = RecordTool(calls[answered])
    if answered + 1 < len(calls):
        following = answered + 1
        return AwaitingTools(job, calls, following), (recorded, RunTool(job, following, calls[following]))
    return Preparing(), (recorded, NextRequest())


def _after_response(job: int, calls: tuple[ToolCall, ...], *, steering_waits: bool) -> Step:
    """A complete response: its tools, the turn's end, or (a message waits) the next request."""
    if calls:
        return AwaitingTools(job, calls, 0), (RecordResponse(completes=False), RunTool(job, 0, calls[0]))
    if steering_waits:
        return Preparing(), (RecordResponse(completes=False), NextRequest())
    return Preparing(), (RecordResponse(completes=True), EndTurn("completed"))


def _after_error(job: int, verdict: ProviderVerdict) -> Step:
    """A provider error, as `turn.provider_verdict` judged it (the table in `turn.py`)."""
    match verdict:
        case RetryAfter(wait_ms):
            return AwaitingRetry(job, wait_ms), (RecordError(), WaitThenRetry(job, wait_ms))
        case Recover():
            return Preparing(), (RecordError(), RecoverContext())
        case Fail() | FailClosed():
            return Preparing(), (RecordError(), EndTurn("failed"))
