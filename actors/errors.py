"""The runtime's typed errors: what a host developer can catch from `Host` and `Turn`.

All derive from `CairnError`; the ones that are the caller's fault are also
`InputError`s (and so `ValueError`s). Store errors (`StorageFailed`,
`CorruptionError`, ...) come through unchanged from `store`.
"""

from __future__ import annotations

from cairn.events.errors import CairnError, InputError


class HostError(CairnError):
    """Base of the runtime's own errors."""


class HostClosed(HostError):
    """The host was closed before (or while) the call ran."""


class HostBusy(HostError):
    """Every live-actor slot stayed busy with a running turn for the whole wait."""


class HostTimeout(HostError, TimeoutError):
    """No answer within the timeout; the work may still finish."""


class TurnTimeout(HostTimeout):
    """A turn gave no result (or no next event) within the timeout; it may still finish."""


class SessionUnavailable(HostError):
    """On a cluster: the host holding the session did not answer an operation on it, and its lease
    did not end within the wait (a hung host's lease ends within its TTL: ask again)."""


class SessionCrashed(HostError):
    """The session's actor failed on a bug; it is rebuilt from its log on its next message."""


class SessionStopped(HostError):
    """The session's actor was stopped (passivation, close) before it could answer."""


class UnknownSession(InputError):
    """The session has no events in the store."""


class ToolNotWaiting(InputError):
    """`Host.resolve_tool` named a call that waits for no result: unknown, answered, or timed out."""


class NotInterrupted(InputError):
    """`Host.continue_turn` or `dismiss_interrupted` named a turn that is not the session's
    interrupted turn (`interrupted_turns()` lists them)."""


class TurnRunning(InputError):
    """The session is running a turn, and what was asked needs it idle."""


class NoTurnRunning(InputError):
    """A cancel named a session that runs no turn (on the host asked: a cluster's holder)."""


class SessionExists(InputError):
    """A fork's target already has events."""


class NoInputBudget(InputError):
    """Settings whose window is not larger than the output reserve plus the fixed context (B1, B2, P2).

    With them the budget is unknown or empty: no hand-off, no compaction,
    only local slimming (L3). Refused at `Host.open` and for a new session's
    own settings; `context_window=None` states an unknown window on purpose.
    """


class WorkspaceMismatch(InputError):
    """A message named another workspace than the one the session was started with."""


class MessageTooLarge(InputError):
    """A user message with a text part too large to be carried whole in its log line.

    The log moves a part over the blob threshold (256 KiB encoded) to the
    blob store, and the model would see only its preview; a user's message
    must reach the model whole, so it is refused instead, nothing written.
    """


def describe_exception(exc: BaseException, limit: int = 1_000) -> str:
    """`Class: message` of an exception from a host's code (clipped), even when its `str` fails."""
    try:
        text = str(exc)
    except Exception:
        text = "(its message could not be read)"
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
