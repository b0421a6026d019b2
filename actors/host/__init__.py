"""The host: one store, many sessions, each a session actor (the API is `host.Host`).

`host` is the API (open, send, compact, fork, close); `async_host` the same
for asyncio code (`AsyncHost`); `interrupted` the turns a crash interrupted; `config` its tunables
(`HostConfig`); `registry` the live session actors and their passivation;
`transcript` the pages of what a session's user saw (`Host.transcript`);
`client_view` what a client may see of an event (the one definition);
`inputs` the checks of what `send` is given; `opening` the parts `Host.open`
builds from its arguments; `fork` the copy of a history;
`async_turn` a turn for asyncio code and how `AsyncHost` hears its sessions' threads;
`exit_hook` the closing of forgotten hosts at interpreter exit.
"""

from cairn.actors.host.async_host import AsyncHost
from cairn.actors.host.async_turn import AsyncTurn
from cairn.actors.host.config import HostConfig
from cairn.actors.host.host import Host
from cairn.actors.host.interrupted import InterruptedTurn
from cairn.actors.host.registry import HostStats
from cairn.actors.session.manual import CompactResult

__all__ = ["AsyncHost", "AsyncTurn", "CompactResult", "Host", "HostConfig", "HostStats", "InterruptedTurn"]
