"""cairn's runtime: a host of session actors over the durable log.

    from cairn.actors import Host, WorkspaceTools
    host = Host.open("./cairn-data", tools=WorkspaceTools())
    turn = host.send("session-1", "fix the failing test", workspace="/repo")

See `actors.host` for the full surface and `actors.tools` for tool executors.
"""

from cairn.actors.errors import HostError
from cairn.actors.host import Host
from cairn.actors.session.settings import SessionSettings
from cairn.actors.session.stream import Turn, TurnResult
from cairn.actors.tools import ToolInvocation, ToolOutcome, WorkspaceTools

__all__ = [
    "Host",
    "HostError",
    "SessionSettings",
    "ToolInvocation",
    "ToolOutcome",
    "Turn",
    "TurnResult",
    "WorkspaceTools",
]
