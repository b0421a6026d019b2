"""`McpTools`: the tools of MCP servers (the Model Context Protocol) as a host's tool executor.

    fs = McpServer(name="fs", command="npx", args=("@modelcontextprotocol/server-filesystem", "/srv/ws"))
    tools = McpTools([fs])
    host = Host.open("store", provider=..., tools=tools)    # tools.close() after host.close()

Each `McpServer` is a stdio command (with arguments, environment and working
folder) or a streamable-HTTP URL (with headers), run through the official
`mcp` SDK's `Client` on an event loop thread of the executor's own. Its
tools reach the model as `<server>__<tool>` (names cut to the 64 characters
providers take), with the server's input schema as the parameters, and
each call goes to its server and back as a `ToolOutcome`:

| MCP result                        | cairn                                                  |
|-----------------------------------|--------------------------------------------------------|
| text content                      | a `TextPart`                                           |
| image content                     | an `ImagePart` (media type and base64 data)            |
| audio, resource links, blobs      | a `TextPart` saying what it was (not shown to models)  |
| an embedded text resource         | a `TextPart` with its text                             |
| structured content, no other      | a `TextPart` with its JSON                             |
| `isError`                         | status `error`                                         |

A tool's effect is `read` when the server annotates it `readOnlyHint`,
else `write` (a tool the server says nothing about is taken to change
something, so snipping keeps its results longer); the read-only ones are
the executor's `read_only` names. Every outcome names the server and the
tool's own name there (`server`, `server_tool`), which the call's
`tool-result` records. cairn budgets what the model sees of a result by the
X rules, as for any tool.

Servers start when the executor is made, all at once (`start_timeout_s`
each); one that cannot start is left out with a warning, and tried again
in the background with back-off (1 s doubling to 60 s while it keeps
failing to start). A server whose connection breaks (it crashed, or wrote
what is not JSON-RPC) or that lets a call outlive `call_timeout_s` (it may
hold the next ones too) gives that call an error result at once or at the
timeout, and is started again after 1 s; its calls meanwhile get an error
result saying it is not running. When a server
says its tools changed, they are listed again: calls follow the new list at
once (a session's schemas are those it began with). `close()` ends every
server (a stdio server's process is ended with it; one whose parent dies
sees its stdin close). A server's environment and headers are never
logged or shown: `repr` hides their values.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import re
import threading
from collections.abc import Sequence
from typing import Any

import msgspec

from cairn.actors.tools import ToolInvocation, ToolOutcome
from cairn.events.errors import InputError
from cairn.events.model import ImagePart, Part, TextPart, ToolEffect, ToolStatus
from cairn.store.jetstream.loop import LoopThread

log = logging.getLogger("cairn.mcp")

#: what a server's name may be: it prefixes its tools' names
_SERVER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}")
_NOT_NAME = re.compile(r"[^A-Za-z0-9_-]")
#: the longest tool name providers take (OpenAI's function names)
MAX_TOOL_NAME = 64
SEPARATOR = "__"
#: the waits before a server that failed is started again
RESTART_FIRST_S, RESTART_MAX_S = 1.0, 60.0


class McpServer(msgspec.Struct, frozen=True, kw_only=True):
    """One MCP server: a stdio `command` (with `args`, `env` added to a minimal environment, `cwd`),
    or a streamable-HTTP `url` (with `headers`). `name` prefixes its tools."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = msgspec.field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _SERVER_NAME.fullmatch(self.name) or SEPARATOR in self.name:
            raise InputError(f"an MCP server's name is 1-32 of A-Za-z0-9_- without '__', not {self.name!r}")
        if (self.command is None) == (self.url is None):
            raise InputError(
                f"MCP server {self.name}: give a command (stdio) or a url (streamable HTTP), one"
            )
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise InputError(f"MCP server {self.name}: the url must be http(s), not {self.url[:40]!r}")

    def __repr__(self) -> str:
        where = (
            f"url={_without_userinfo(self.url)!r}"
            if self.url
            else f"command={self.command!r}, args={self.args!r}"
        )
        hidden = ", ".join(f"{k}=***" for k in (*self.env, *self.headers))
        return f"McpServer(name={self.name!r}, {where}{', ' + hidden if hidden else ''})"

    __str__ = __repr__


def _without_userinfo(url: str | None) -> str:
    return re.sub(r"//[^/@]*@", "//***@", url or "")


class _Tool(msgspec.Struct, frozen=True):
    server: str
    remote: str
    schema: str
    read_only: bool


class _Running:
    """One server's connection: its client while it runs, and its tools as last listed."""

    def __init__(self, spec: McpServer) -> None:
        self.spec = spec
        self.client: Any = None
        self.tools: dict[str, _Tool] = {}
        self.started = asyncio.Event()
        self.failure = ""
        self.stop = asyncio.Event()
        #: set by a call that found the connection broken (made anew for each connection)
        self.broken = asyncio.Event()
        self.task: asyncio.Task[None] | None = None


class McpTools:
    """The tools of `servers` as one tool executor (see the module doc). Thread-safe; `close()` after
    the host that uses it."""

    def __init__(
        self, servers: Sequence[McpServer], *, call_timeout_s: float = 60.0, start_timeout_s: float = 30.0
    ) -> None:
        names = [s.name for s in servers]
        if len(set(names)) != len(names):
            raise InputError(f"MCP server names must differ: {names}")
        self.call_timeout_s = call_timeout_s
        self._lock = threading.Lock()
        self._loop = LoopThread("cairn-mcp")
        self._servers = {s.name: _Running(s) for s in servers}
        self._closed = False
        self._loop.call(self._start_all(start_timeout_s), start_timeout_s + 10)

    # -- what the host reads -------------------------------------------------------------------------

    def _tools(self) -> dict[str, _Tool]:
        with self._lock:
            return {name: tool for running in self._servers.values() for name, tool in running.tools.items()}

    @property
    def schemas(self) -> tuple[str, ...]:
        """The tools' schemas, as the providers' adapters pass them (sorted by name)."""
        return tuple(tool.schema for _, tool in sorted(self._tools().items()))

    @property
    def read_only(self) -> tuple[str, ...]:
        """The names of the tools their servers annotate read-only."""
        return tuple(sorted(name for name, tool in self._tools().items() if tool.read_only))

    def failures(self) -> dict[str, str]:
        """The servers not running now, and why."""
        with self._lock:
            return {name: r.failure for name, r in self._servers.items() if r.client is None and r.failure}

    # -- calls ----------------------------------------------------------------------------------------

    def __call__(self, invocation: ToolInvocation) -> ToolOutcome:
        tool = self._tools().get(invocation.name)
        if tool is None:
            return ToolOutcome(content=f"no MCP tool named {invocation.name!r}", status="error")
        arguments = invocation.arguments()  # ToolError (shown to the model) when not a JSON object
        try:
            outcome = outcome_of(self._loop.call(self._call(tool, arguments), self.call_timeout_s + 5))
        except TimeoutError:
            why = f"MCP server {tool.server} did not answer within {self.call_timeout_s:g} s"
            outcome = ToolOutcome(content=why, status="error")
        except _Unavailable as exc:
            outcome = ToolOutcome(content=str(exc), status="error")
        except Exception as exc:  # the SDK's errors: the server refused or broke the call
            why = f"MCP server {tool.server}, tool {tool.remote}: {type(exc).__name__}: {exc}"
            outcome = ToolOutcome(content=why[:2_000], status="error")
        effect: ToolEffect = "read" if tool.read_only else "write"
        return msgspec.structs.replace(outcome, effect=effect, server=tool.server, server_tool=tool.remote)

    async def _call(self, tool: _Tool, arguments: dict[str, Any]) -> Any:
        """The server's result; a broken connection (the server crashed, wrote what is not JSON-RPC,
        or let a call time out) also makes its supervisor start it again."""
        from mcp.shared.exceptions import MCPError

        running = self._servers[tool.server]
        client = running.client
        if client is None:
            raise _Unavailable(f"MCP server {tool.server} is not running: {running.failure or 'starting'}")
        try:
            async with asyncio.timeout(self.call_timeout_s):
                return await client.call_tool(
                    tool.remote, arguments, read_timeout_seconds=self.call_timeout_s
                )
        except TimeoutError:
            running.broken.set()  # a server that let a call hang may hold the next ones: start it again
            raise
        except MCPError as exc:
            if exc.code != CONNECTION_CLOSED:
                raise  # the server's answer to this call
            running.broken.set()
            raise _Unavailable(
                f"MCP server {tool.server} stopped (its connection closed); it is restarted"
            ) from None
        except (OSError, EOFError, RuntimeError) as exc:  # the transport broke (the SDK's stream errors)
            running.broken.set()
            raise _Unavailable(
                f"MCP server {tool.server} broke: {type(exc).__name__}; it is restarted"
            ) from None

    # -- the servers' lives ---------------------------------------------------------------------------

    async def _start_all(self, timeout_s: float) -> None:
        for running in self._servers.values():
            running.task = asyncio.create_task(self._supervise(running), name=f"mcp-{running.spec.name}")
        waits = [asyncio.wait_for(r.started.wait(), timeout_s) for r in self._servers.values()]
        for running, outcome in zip(
            self._servers.values(), await asyncio.gather(*waits, return_exceptions=True), strict=True
        ):
            if isinstance(outcome, BaseException):
                running.failure = running.failure or f"did not start within {timeout_s:g} s"
                log.warning("cairn: MCP server %s: %s", running.spec.name, running.failure)

    async def _supervise(self, running: _Running) -> None:
        """Run the server; when it fails or ends, start it again after a back-off, until `close`."""
        wait = RESTART_FIRST_S
        while not running.stop.is_set():
            try:
                await self._serve(running)
            except Exception as exc:
                running.failure = _reason(exc)
                log.warning("cairn: MCP server %s stopped: %s", running.spec.name, running.failure)
            finally:
                with self._lock:
                    if running.client is not None:  # it ran: the back-off starts again
                        wait = RESTART_FIRST_S
                    running.client = None
                running.started.set()  # a failed start is an outcome too (`_start_all` waits for it)
            if running.stop.is_set():
                return
            try:
                await asyncio.wait_for(running.stop.wait(), wait)
            except TimeoutError:
                wait = min(wait * 2, RESTART_MAX_S)

    async def _serve(self, running: _Running) -> None:
        from mcp import Client

        changed = asyncio.Event()
        running.broken = asyncio.Event()

        async def on_message(message: Any) -> None:
            if type(message).__name__ == "ToolListChangedNotification":
                changed.set()

        async with Client(_transport(running.spec), message_handler=on_message, cache=None) as client:
            await self._list(running, client)
            with self._lock:
                running.client = client
                running.failure = ""
            running.started.set()
            while not running.stop.is_set():
                waits = [asyncio.ensure_future(e.wait()) for e in (running.stop, changed, running.broken)]
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                for wait in waits:
                    wait.cancel()
                if running.broken.is_set():
                    raise _Unavailable("its connection broke")
                if changed.is_set():
                    changed.clear()
                    await self._list(running, client)

    async def _list(self, running: _Running, client: Any) -> None:
        listed = []
        cursor = None
        while True:
            page = await client.list_tools(cursor=cursor)
            listed.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        tools = {}
        for tool in listed:
            name = tool_name(running.spec.name, tool.name)
            annotations = tool.annotations
            read_only = bool(annotations is not None and annotations.read_only_hint)
            tools[name] = _Tool(running.spec.name, tool.name, schema_of(name, tool), read_only)
        with self._lock:
            running.tools = tools

    def close(self) -> None:
        """End every server (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._loop.call(self._stop_all(), 30.0)
        except Exception as exc:
            log.warning("cairn: stopping the MCP servers: %s", exc)
        self._loop.close()

    async def _stop_all(self) -> None:
        tasks = []
        for running in self._servers.values():
            running.stop.set()
            if running.task is not None:
                tasks.append(running.task)
        await asyncio.gather(*tasks, return_exceptions=True)

    def __enter__(self) -> McpTools:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Unavailable(Exception):
    """A call to a server that is not running."""


#: the JSON-RPC error code the SDK gives a request whose connection closed
CONNECTION_CLOSED = -32000


def _reason(exc: BaseException) -> str:
    """Why a server stopped, in a line: the first error inside the SDK's exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"[:500]


def _transport(spec: McpServer) -> Any:
    """The SDK's transport for `spec`: its stdio parameters, or a streamable-HTTP client with the headers."""
    if spec.command is not None:
        from mcp.client.stdio import StdioServerParameters

        return StdioServerParameters(
            command=spec.command, args=list(spec.args), env=spec.env or None, cwd=spec.cwd
        )
    assert spec.url is not None
    if not spec.headers:
        return spec.url
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    return streamable_http_client(spec.url, http_client=httpx2.AsyncClient(headers=spec.headers))


def tool_name(server: str, remote: str) -> str:
    """`<server>__<tool>`, in the characters providers take, at most 64 of them."""
    return f"{server}{SEPARATOR}{_NOT_NAME.sub('_', remote)}"[:MAX_TOOL_NAME]


def schema_of(name: str, tool: Any) -> str:
    """The tool's schema as the adapters take it (the form `WorkspaceTools` gives)."""
    parameters = tool.input_schema if isinstance(tool.input_schema, dict) else {"type": "object"}
    body = {
        "type": "function",
        "function": {
            "name": name,
            "description": tool.description or tool.title or "",
            "parameters": parameters,
        },
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def outcome_of(result: Any) -> ToolOutcome:
    """A `CallToolResult` as a `ToolOutcome` (the table in the module doc)."""
    parts: list[Part] = []
    for block in result.content or ():
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(TextPart(block.text))
        elif kind == "image":
            parts.append(ImagePart(media_type=block.mime_type, data=block.data))
        elif kind == "audio":
            size = len(base64.b64decode(block.data or "", validate=False))
            parts.append(TextPart(f"[audio {block.mime_type}, {size} bytes, not shown]"))
        elif kind == "resource_link":
            parts.append(TextPart(f"[resource {block.name}: {block.uri}]"))
        elif kind == "resource":
            resource = block.resource
            text = getattr(resource, "text", None)
            parts.append(
                TextPart(text if text is not None else f"[resource {resource.uri}: binary, not shown]")
            )
        else:
            parts.append(TextPart(f"[{kind or 'unknown'} content, not shown]"))
    if not parts and result.structured_content is not None:
        parts.append(TextPart(json.dumps(result.structured_content, sort_keys=True)))
    status: ToolStatus = "error" if result.is_error else "ok"
    if len(parts) == 1 and isinstance(parts[0], TextPart):
        return ToolOutcome(content=parts[0].text, status=status)
    return ToolOutcome(content=tuple(parts) if parts else "", status=status)
