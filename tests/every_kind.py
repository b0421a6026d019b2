"""A store that holds every event kind: what the demo leaves, plus what the demo never does.

The demo gives hand-offs, slimming, LLM and fallback checkpoints and a
reactive recovery. `add_the_rest` adds, through the public API where a host
would: a tool result kept as a blob and a failed turn (session `extra`), a
turn the host cancelled while its tool ran (session `cancelled`), turns
stopped mid-tool then continued, and dismissed (session `interrupted`), a call
deferred for an approval, then answered (session `approved`), two forks,
and the owner change a cluster host writes when it takes a session. The
read-command and audit tests build on it, and fail when a new kind is
missing from it, so they keep covering every kind.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from cairn import Host, HostConfig, demo
from cairn.actors.provider.scripted import Reply, ScriptedProvider, http_error
from cairn.actors.tools import Deferred, ToolInvocation, ToolOutcome
from cairn.events.kinds import EVENT_TYPES, OwnerChanged
from cairn.events.model import ToolCall
from cairn.store import Journal

#: every kind's tag
EVERY_KIND = {str(cls.__struct_config__.tag) for cls in EVENT_TYPES}
BIG = 300_000  # chars of a tool result: over the 256 KiB blob threshold
WAIT = 60.0
CANCEL_REASON = "the user pressed stop"


class BigTool:
    """`big` returns BIG chars: a result kept in the blob store, as an MCP server's tool would."""

    schemas = ('{"name":"big","parameters":{"type":"object"}}',)
    read_only = ("big",)

    def __call__(self, invocation: ToolInvocation) -> ToolOutcome:
        # as an MCP server's tool comes back (`McpTools`): the result names the server and its tool
        return ToolOutcome(
            content="x" * (BIG - 20) + " end of big output\n", server="bigs", server_tool="make_big"
        )


class HoldTool:
    """`hold` waits until `release`: a tool still running when its turn is cancelled."""

    schemas = ('{"name":"hold","parameters":{"type":"object"}}',)
    read_only = ("hold",)

    def __init__(self) -> None:
        self.holding = threading.Event()
        self.release = threading.Event()

    def __call__(self, invocation: ToolInvocation) -> ToolOutcome:
        self.holding.set()
        self.release.wait(WAIT)
        return ToolOutcome(content="held")


def add_the_rest(root: Path) -> None:
    """Add to the demo's store at `root` the kinds the demo does not write (the module doc)."""
    provider = ScriptedProvider(
        turns=(
            Reply(text="Running the big tool.", tool_calls=(ToolCall("big-1", "big", "{}"),)),
            Reply(text="It printed a lot."),
            http_error(400, "this request is malformed"),  # not retryable: provider-error, turn-failed
        )
    )
    config = HostConfig(sweep=False)
    with Host.open(root, provider=provider, tools=BigTool(), settings=demo.SETTINGS, config=config) as host:
        assert host.send("extra", "run the big tool", workspace=root).result(WAIT).ok
        failed = host.send("extra", "and again").result(WAIT)
        assert failed.status == "failed" and failed.phase == "provider"
        host.fork("demo-1", "demo-1-fork")
        host.fork("extra", "extra-fork")
    hold = HoldTool()
    provider = ScriptedProvider(
        turns=(Reply(text="This takes a while.", tool_calls=(ToolCall("h-1", "hold", "{}"),)),)
    )
    try:
        with Host.open(root, provider=provider, tools=hold, settings=demo.SETTINGS, config=config) as host:
            held = host.send("cancelled", "run the long job", workspace=root)
            assert hold.holding.wait(WAIT)
            held.cancel(CANCEL_REASON)
            assert held.result(WAIT).status == "cancelled"
    finally:
        hold.release.set()
    _interrupt(root, config, then_continue=True)
    _interrupt(root, config, then_continue=False)
    _approved(root, config)
    with Journal.open(root) as journal:  # what a cluster host writes when it takes a session
        taken = OwnerChanged(host_id="host-b", lease_revision=7, previous_host="host-a")
        journal.append("extra", [taken], expected_seq=journal.last_seq("extra"))


class ApprovalTool:
    """`deploy` waits for a person's yes (`Deferred`): the turn records `tool-deferred`."""

    schemas = ('{"name":"deploy","parameters":{"type":"object"}}',)

    def __init__(self) -> None:
        self.deferred = threading.Event()

    def __call__(self, invocation: ToolInvocation) -> ToolOutcome | Deferred:
        self.deferred.set()
        return Deferred(timeout_s=600)


def _approved(root: Path, config: HostConfig) -> None:
    """Session `approved`: a call deferred to the host (an approval pause), then its result posted."""
    tools = ApprovalTool()
    provider = ScriptedProvider(
        turns=(
            Reply(text="Deploying, once you say yes.", tool_calls=(ToolCall("d-1", "deploy", "{}"),)),
            Reply(text="Deployed."),
        )
    )
    with Host.open(root, provider=provider, tools=tools, settings=demo.SETTINGS, config=config) as host:
        turn = host.send("approved", "deploy the site", workspace=root)
        assert tools.deferred.wait(WAIT)
        deadline = time.monotonic() + WAIT
        while not host.waiting_tools("approved"):  # the session takes the deferral by message
            assert time.monotonic() < deadline, "the deploy call never waited"
        host.resolve_tool("approved", "d-1", ToolOutcome(content="approved by ops", effect="write"))
        assert turn.result(WAIT).ok


def _interrupt(root: Path, config: HostConfig, *, then_continue: bool) -> None:
    """Session `interrupted`: a turn stopped while its tool runs, then continued or dismissed."""
    hold = HoldTool()
    call = ToolCall(f"hold-{int(then_continue)}", "hold", "{}")
    provider = ScriptedProvider(
        turns=(
            Reply(text="This takes a while.", tool_calls=(call,)),
            Reply(text="Picked up where it stopped."),
        )
    )
    try:
        with Host.open(root, provider=provider, tools=hold, settings=demo.SETTINGS, config=config) as host:
            held = host.send("interrupted", "run the long job", workspace=root)
            assert hold.holding.wait(WAIT)
            assert host.stop_session("interrupted")
            turn_id = held.result(WAIT).turn_id
            if then_continue:
                assert host.continue_turn("interrupted", turn_id).result(WAIT).ok
            else:
                host.dismiss_interrupted("interrupted", turn_id, "the user started over")
            assert host.interrupted_turns() == []
    finally:
        hold.release.set()
