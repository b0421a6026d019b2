"""The typed errors of serving sessions on a cluster: what a client or a cluster host can catch.

The client's (`ClusterUnavailable` and below) say why a message got no turn:
nobody is subscribed, nobody accepted it in time, or a host refused it
before the turn began (with the host's error class). `LeaseNotHeld` is the
host's own guard: a session it does not hold (any more) is not written.
"""

from __future__ import annotations

from cairn.actors.errors import HostError, HostTimeout
from cairn.events.errors import InputError
from cairn.store.errors import StorageError


class ClusterUnavailable(HostError):
    """No host of the cluster took the message (base of the client's errors)."""


class NoHostAnswered(ClusterUnavailable):
    """No cluster host listens on the session's subject (NATS had no responders): none is running."""


class AcceptTimeout(ClusterUnavailable, HostTimeout):
    """No host accepted the message within the timeout (a failover may be under way: send again)."""


class RequestRefused(ClusterUnavailable):
    """A host refused the message before a turn began; `error_class` is the host's error."""

    def __init__(self, error_class: str, message: str) -> None:
        self.error_class = error_class
        self.message = message
        super().__init__(f"{error_class}: {message}" if message else error_class)


class OutcomeUnknown(ClusterUnavailable):
    """The reply stream broke before it said whether a host took the message (a frame lost on the
    way): it may have been recorded, and its turn may run. Send again with the same idempotency key
    (`key`): a host answers from the log, or joins the turn, and runs nothing twice."""

    def __init__(self, key: str, why: str) -> None:
        self.key = key
        super().__init__(f"{why}; the outcome is unknown: send again with idempotency_key={key!r}")


class InvalidHostId(InputError):
    """A host id that cannot be a NATS subject token (1-64 of letters, digits, `_` and `-`)."""


class LeaseNotHeld(StorageError):
    """This host does not hold the session's lease (lost, expired, or not yet fenced): nothing written."""


class ReplicaBehind(StorageError):
    """The cluster's reads of a session stayed behind what this host wrote to it (a lagging replica)."""
