"""Shared parts of the actor tests: a clock, a disk that can fail, tools, an agent, seeded logs.

Everything is real: the journal writes real files, the actors run on real
pykka threads. Time is a settable clock (the journal stamps records with it
too), the disk's fsync can be told to fail like a dying device, and
sessions can be seeded with a history written straight to the journal, as a
previous run of a host would have left it.
"""

from __future__ import annotations

import errno
import os
import re
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from cairn.actors.host import Host, HostConfig
from cairn.actors.provider.base import ProviderRequest
from cairn.actors.provider.scripted import Outcome, Reply, ScriptedProvider
from cairn.actors.session.settings import SessionSettings
from cairn.actors.tools import ToolInvocation, ToolOutcome
from cairn.events.kinds import (
    AssistantMessage,
    EventBase,
    SessionStarted,
    ToolResult,
    TurnCompleted,
    TurnStarted,
    UserMessage,
)
from cairn.events.model import TextPart, ToolCall
from cairn.events.state import SessionState
from cairn.store.journal import Journal

WAIT = 30.0
WINDOW = 20_000  # with CAP: input budget 16,000, hand-off at 11,200, compaction at 12,800
CAP = 4_000
SETTINGS = SessionSettings(
    model="scripted", context_window=WINDOW, max_output_tokens=CAP, system_prompt="You are a test agent."
)
START_MS = 1_767_225_600_000  # 2026-01-01


class Clock:
    """A settable millisecond clock, shared by the journal and the sessions."""

    def __init__(self, now: int = START_MS) -> None:
        self.now = now
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            return self.now

    def advance(self, ms: int) -> None:
        with self._lock:
            self.now += ms


class Disk:
    """An fsync that can be told to fail: the unsynced bytes are lost, then EIO (a dying device)."""

    def __init__(self) -> None:
        self.armed = False
        self.failures = 0
        self._synced: dict[tuple[int, int], int] = {}

    def fsync(self, fd: int) -> None:
        info = os.fstat(fd)
        key = (info.st_dev, info.st_ino)
        regular = (info.st_mode & 0o170000) == 0o100000
        if self.armed:
            self.failures += 1
            if regular:
                os.ftruncate(fd, self._synced.get(key, 0))
            raise OSError(errno.EIO, "injected I/O error")
        os.fsync(fd)
        if regular:
            self._synced[key] = info.st_size


def words(tokens: int, label: str = "") -> str:
    """Text of about `tokens` tokens (cl100k: ' word' is one token)."""
    return f"{label}:" + " word" * tokens


class SizedTools:
    """A tool executor: `read {"tokens": N}` returns text of about N tokens; anything else errs."""

    schemas = ('{"name":"read","parameters":{"type":"object"}}',)
    read_only = ("read",)

    def __init__(self) -> None:
        self.calls: list[ToolInvocation] = []
        self._lock = threading.Lock()

    def __call__(self, invocation: ToolInvocation) -> ToolOutcome:
        with self._lock:
            self.calls.append(invocation)
        args = invocation.arguments()
        if invocation.name != "read":
            return ToolOutcome(content=f"no tool {invocation.name}", status="error")
        return ToolOutcome(content=words(int(args.get("tokens", 10)), invocation.call.id))


_PLAN = re.compile(r"tools (\d+) x (\d+) #(\S+)")


class GatedTools(SizedTools):
    """A tool executor whose first call waits for the test: a turn held mid-flight, no sleeping."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, invocation: ToolInvocation) -> ToolOutcome:
        if not self.entered.is_set():
            self.entered.set()
            assert self.release.wait(WAIT)
        return super().__call__(invocation)


class Agent:
    """A scripted model: a message `tools N x T #tag` makes it call `read` N times, T tokens each.

    Stateful per tag, so a plan survives compaction (the tag is in the
    active-task reminder) and a replayed request; without a plan it replies.
    """

    def __init__(self) -> None:
        self.made: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, request: ProviderRequest) -> Outcome | None:
        if request.purpose != "turn":
            return None
        plan = None
        for message in reversed(request.messages):
            if message.role == "user" and message.meta.origin in ("", "active-task"):
                content = message.content
                text = (
                    content
                    if isinstance(content, str)
                    else "".join(p.text for p in content if isinstance(p, TextPart))
                )
                plan = _PLAN.search(text)
                break
        if plan is None:
            return Reply(text="All done.")
        count, tokens, tag = int(plan.group(1)), int(plan.group(2)), plan.group(3)
        with self._lock:
            made = self.made.get(tag, 0)
            if made >= count:
                return Reply(text=f"Finished {tag}.")
            self.made[tag] = made + 1
        call = ToolCall(f"{tag}-{made}", "read", f'{{"tokens": {tokens}}}')
        return Reply(text=f"Reading part {made} of {tag}.", tool_calls=(call,))


def scripted(
    *turns: Outcome, agent: Agent | None = None, summaries: tuple[Outcome, ...] = ()
) -> ScriptedProvider:
    """The scripted model: `turns` answer turn requests in order, then the agent answers."""
    responder = agent if agent is not None else Agent()
    return ScriptedProvider(turns=turns, summaries=summaries, responder=responder)


def open_host(
    root: Path, provider: Any, *, clock: Clock | None = None, disk: Disk | None = None, **kwargs: Any
) -> Host:
    """A host on `root` with the test clock, no real sleeping and no sweeper (`config_from` the rest)."""
    return Host.open(
        root,
        provider=provider,
        tools=kwargs.pop("tools", SizedTools()),
        settings=kwargs.pop("settings", SETTINGS),
        clock_ms=clock or Clock(),
        sleep=kwargs.pop("sleep", lambda seconds: None),
        fsync=disk.fsync if disk is not None else os.fsync,
        config=config_from(kwargs),
        **kwargs,
    )


def config_from(kwargs: dict[str, Any]) -> HostConfig:
    """A test host's config, without a sweeper: the keywords naming its fields (`max_live_sessions=2`)
    are taken out of `kwargs`."""
    tunables = {name: kwargs.pop(name) for name in HostConfig.__struct_fields__ if name in kwargs}
    return HostConfig(**{"sweep": False, **tunables})


# --- seeded histories -----------------------------------------------------------------------


class Seed:
    """Appends a session's history straight to the journal, turn by turn (as a past run left it)."""

    def __init__(
        self,
        journal: Journal,
        sid: str,
        workspace: str,
        *,
        window: int | None = WINDOW,
        cap: int | None = CAP,
    ) -> None:
        self.journal = journal
        self.sid = sid
        self._calls = 0
        self._append(
            [
                SessionStarted(
                    workspace=workspace,
                    model="scripted",
                    context_window=window,
                    max_output_tokens=cap,
                    system_prompt=SETTINGS.system_prompt,
                    tool_schemas=SizedTools.schemas,
                    read_only_tools=SizedTools.read_only,
                )
            ]
        )

    def _append(self, events: list[EventBase]) -> None:
        self.journal.append(self.sid, events, expected_seq=self.journal.last_seq(self.sid))

    def turn(self, user_tokens: int = 10, tools: Iterable[int] = (), reply_tokens: int = 5) -> None:
        seq = self.journal.last_seq(self.sid)
        events: list[EventBase] = [
            UserMessage(message_id=f"u{seq + 1}", content=(TextPart(words(user_tokens, "ask")),)),
            TurnStarted(turn_id=f"t{seq + 2}", message_id=f"u{seq + 1}"),
        ]
        for tokens in tools:
            self._calls += 1
            call = ToolCall(f"seed-{self._calls}", "read", f'{{"tokens": {tokens}}}')
            events.append(
                AssistantMessage(message_id=f"a{self._calls}", request_id="seed", tool_calls=(call,))
            )
            events.append(
                ToolResult(
                    call_id=call.id,
                    tool_name="read",
                    status="ok",
                    effect="read",
                    content=(TextPart(words(tokens, call.id)),),
                )
            )
        reply = words(reply_tokens, "re")
        events.append(AssistantMessage(message_id=f"f{seq}", request_id="seed", text=reply))
        events.append(TurnCompleted(turn_id=f"t{seq + 2}", requests=1))
        self._append(events)


# --- replay equivalence -----------------------------------------------------------------------


def reopen_and_compare(
    host: Host, root: Path, sids: Iterable[str], provider: Any | None = None, **kwargs: Any
) -> Host:
    """Close `host`; a fresh host on the same store must rebuild each session's state and next request.

    Returns the fresh host (the caller closes it).
    """
    names = list(sids)
    live: dict[str, SessionState] = {sid: host.state(sid) for sid in names}
    requests = {sid: host.next_request(sid) for sid in names}
    host.close()
    fresh = open_host(root, provider if provider is not None else scripted(), **kwargs)
    for sid in names:
        assert fresh.state(sid) == live[sid], f"{sid}: replayed state differs from the live one"
        assert fresh.next_request(sid) == requests[sid], f"{sid}: replayed next request differs"
        assert fresh.journal.replay_full(sid) == live[sid], f"{sid}: full replay differs"
    return fresh


def kinds(journal: Journal, sid: str, from_seq: int = 1) -> list[str]:
    return [record.line_kind for record in journal.read(sid, from_seq)]
