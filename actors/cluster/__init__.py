"""Sessions across hosts on a NATS JetStream cluster: routing, ownership, failover (DESIGN §5).

`cluster_host` is one host process (`ClusterHost`: a `Host` over the
cluster's journal, serving turns sent over NATS); `client` the library that
sends them (`ClusterClient`, whose `send` returns a handle shaped like
`Host.send`'s). Inside: `names` (subjects and host ids), `frames` (the wire
protocol), `routing` (where a message goes: pure), `forwarding` (to the
holder, or waiting its lease out), `ownership` (lease, fence, loss),
`gate` (the journal that writes only owned sessions), `idle` (giving
back idle sessions' leases), `outbox` (a turn's frames to its client),
`errors`.
"""

from cairn.actors.cluster.client import ClusterClient, RemoteTurn
from cairn.actors.cluster.cluster_host import ClusterHost, ClusterStats
from cairn.actors.cluster.errors import (
    AcceptTimeout,
    ClusterUnavailable,
    InvalidHostId,
    LeaseNotHeld,
    NoHostAnswered,
    OutcomeUnknown,
    RequestRefused,
)
from cairn.actors.cluster.names import ClusterNames

__all__ = [
    "AcceptTimeout",
    "ClusterClient",
    "ClusterHost",
    "ClusterNames",
    "ClusterStats",
    "ClusterUnavailable",
    "InvalidHostId",
    "LeaseNotHeld",
    "NoHostAnswered",
    "OutcomeUnknown",
    "RemoteTurn",
    "RequestRefused",
]
