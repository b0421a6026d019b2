"""Running one tool call with the host's executor: whatever goes wrong becomes an error result.

Called for the session actor, off its thread (`TurnLoop._run_tool`), for
each call of an assistant message that is already durable (effects run
after the acknowledgement); the outcome goes back to the actor as a message.
The executor is the host's code: an exception it raises,
an outcome that is not a well-formed `ToolOutcome`, or a call that does not
return within the host's `tool_timeout_s` (`actors.tool_runner`), is turned
into an `error` result the model sees; it never fails the turn.
"""

from __future__ import annotations

import logging

from cairn.actors.errors import describe_exception
from cairn.actors.session.turn import error_outcome
from cairn.actors.tool_runner import TimedOut, ToolRunner
from cairn.actors.tools import Deferred, ToolExecutor, ToolInvocation, ToolOutcome, check_outcome
from cairn.events.model import ToolCall

log = logging.getLogger("cairn.session")


def run_tool(
    tools: ToolExecutor | None,
    call: ToolCall,
    *,
    session: str,
    workspace: str | None,
    turn_id: str,
    runner: ToolRunner | None = None,
) -> ToolOutcome | Deferred:
    """The host's executor for one call, checked; whatever goes wrong is an error result the model sees.

    Even a BaseException (KeyboardInterrupt, SystemExit) the tool raises
    is one: let through, pykka would stop every actor of the process.
    With a `runner` the call runs on its threads within its timeout; without
    one, on this thread (unbounded).
    """
    if tools is None or workspace is None:
        return error_outcome(f"no tool named {call.name!r} is available")
    invocation = ToolInvocation(session=session, workspace=workspace, turn_id=turn_id, call=call)
    try:
        value = tools(invocation) if runner is None else runner.run(lambda: tools(invocation))
    except BaseException as exc:
        if not isinstance(exc, Exception):
            log.warning(
                "cairn: session %r: the tool %r raised %s; recorded as its error result",
                session,
                call.name,
                type(exc).__name__,
            )
        return error_outcome(f"the tool {call.name!r} failed: {describe_exception(exc)}")
    if isinstance(value, TimedOut):
        return error_outcome(
            _timed_out(call.name, value, getattr(tools, "cancels_on_timeout", False) is True)
        )
    if isinstance(value, Deferred):
        limit = value.timeout_s
        if limit is not None and (isinstance(limit, bool) or not 0 < limit < float("inf")):
            return error_outcome(f"the tool {call.name!r} deferred its result with a bad timeout {limit!r}")
        return value
    outcome = check_outcome(value)
    if isinstance(outcome, str):
        return error_outcome(f"the tool {call.name!r} {outcome}")
    return outcome


def _timed_out(name: str, timed_out: TimedOut, cancelled: bool = False) -> str:
    """What the model (and the log) reads when a call ran out of time; `cancelled`: the executor
    stops a call at its timeout (`cancels_on_timeout`, as an `async def` executor's task is)."""
    if timed_out.started:
        after = (
            "it was cancelled"
            if cancelled
            else "it may still be running, and whatever it returns is discarded"
        )
        return (
            f"the tool {name!r} did not finish within {timed_out.timeout_s:g} s (the host's tool_timeout_s);"
            f" {after}"
        )
    return (
        f"the tool {name!r} did not start within {timed_out.timeout_s:g} s: every tool thread is busy"
        f" ({timed_out.hung} calls still running past their timeout); it was not run"
    )
