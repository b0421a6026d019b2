"""Where the hosts and clients of one cairn cluster meet: subjects, the lease bucket, the event layout.

| subject                         | who listens                    | carries                             |
|---------------------------------|--------------------------------|-------------------------------------|
| `<prefix>.turn.<session token>` | every host, in queue group     | a client's `TurnRequest`, its reply |
|                                 | `<prefix>-hosts` (one gets it) | subject the client's inbox          |
| `<prefix>.host.<host id>.turn`  | that host only                 | a `Forwarded` from another host     |
| `<prefix>.host.<host id>.ops`   | that host only                 | an `OpRequest` on a session it      |
|                                 |                                | holds (`actors.host.ops`), its answer   |

The session token is `store.jetstream.names.session_token` (reversible, one
subject token, never a wildcard); a host id is 1-64 of `A-Za-z0-9_-` (a
subject token and a lease holder), unique per host PROCESS (a take by the
holder's id renews its lease). `ClusterNames.named(x)` gives a namespace of
its own (tests, benches) on a shared cluster: stream, buckets and subjects.
"""

from __future__ import annotations

import os
import re
import socket
import uuid
from dataclasses import dataclass, field

from cairn.actors.cluster.errors import InvalidHostId
from cairn.store.jetstream.layout import Layout
from cairn.store.jetstream.leases import DEFAULT_BUCKET
from cairn.store.jetstream.names import session_token

_HOST_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_NOT_TOKEN = re.compile(r"[^A-Za-z0-9_-]+")


def checked_host_id(host_id: str) -> str:
    """`host_id` if it can name a host in subjects and leases, else `InvalidHostId`."""
    if not isinstance(host_id, str) or not _HOST_ID.fullmatch(host_id):
        raise InvalidHostId(f"a host id is 1-64 of A-Za-z0-9, '_' and '-', not {host_id!r}")
    return host_id


def default_host_id() -> str:
    """`<hostname>-<pid>-<random>`: unique per process, as a lease holder must be."""
    name = _NOT_TOKEN.sub("-", socket.gethostname()).strip("-")[:32] or "host"
    return f"{name}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class ClusterNames:
    """The names one cluster's hosts and clients share (see the module doc)."""

    layout: Layout = field(default_factory=Layout)
    lease_bucket: str = DEFAULT_BUCKET
    prefix: str = "cairn"

    @classmethod
    def named(cls, name: str) -> ClusterNames:
        """A namespace of its own beside the default one: every stream, bucket and subject suffixed."""
        return cls(layout=Layout.named(name), lease_bucket=f"{DEFAULT_BUCKET}_{name}", prefix=f"cairn-{name}")

    @property
    def queue(self) -> str:
        return f"{self.prefix}-hosts"

    @property
    def turn_wildcard(self) -> str:
        return f"{self.prefix}.turn.*"

    def turn_subject(self, sid: str) -> str:
        """Where a client sends a message for session `sid` (InvalidSessionId for a bad id)."""
        return f"{self.prefix}.turn.{session_token(sid)}"

    def host_subject(self, host_id: str) -> str:
        """Where other hosts forward a message to host `host_id`."""
        return f"{self.prefix}.host.{checked_host_id(host_id)}.turn"

    def ops_subject(self, host_id: str) -> str:
        """Where other hosts ask host `host_id` to run an operation on a session it holds."""
        return f"{self.prefix}.host.{checked_host_id(host_id)}.ops"
