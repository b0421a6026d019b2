"""The HTTP API of a host (`http_app`): sessions, messages, turns and their live event streams.

An ASGI application (Starlette) over an `AsyncHost`; `cairn serve --http`
serves it with uvicorn (`serve.py`). Every body and answer is JSON, every
refusal `application/problem+json` (`problems.py`), checked whole before
the host is asked anything, so a refused request writes nothing.

| route                                  | what                                                 |
|----------------------------------------|------------------------------------------------------|
| `GET  /v1/health`                      | `{"ok": true}` while the host serves                 |
| `GET  /v1/sessions`                    | the session ids in the store                         |
| `GET  /v1/sessions/{id}`               | its model and window, whether a turn runs            |
| `POST /v1/sessions/{id}/messages`      | send a message (the first creates the session): 202  |
|                                        | with its seq and turn; `?wait=true`: 200, the result |
| `GET  /v1/sessions/{id}/events`        | Server-Sent Events after `Last-Event-ID` or `?after=` |
| `GET  /v1/sessions/{id}/transcript`    | a page of what its user saw (`?after=SEQ&limit=N`)   |
| `POST /v1/sessions/{id}/cancel`        | cancel its running turn (`turn-cancelled`)           |
| `GET  /v1/sessions/{id}/tools`         | the client-tool calls its turn waits for             |
| `POST /v1/sessions/{id}/tools/{call}`  | a client tool's result (`client_tools.py`)           |
| `GET  /v1/sessions/{id}/context`       | its next request: figures and the messages shown     |
| `GET  /v1/sessions/{id}/checkpoints`   | its checkpoints (without the summaries)              |
| `POST /v1/sessions/{id}/compact`       | compact now (K4): the checkpoint, or why not         |
| `POST /v1/sessions/{id}/fork`          | `{"target": id}`: a new session with its history     |
| `GET  /v1/interrupted`                 | the turns a crash interrupted, not yet continued     |
| `POST /v1/sessions/{id}/turns/{turn}/continue` | continue an interrupted turn: as a send      |
| `POST /v1/sessions/{id}/turns/{turn}/dismiss`  | `{"reason"}`: it will not be continued       |

A message body: `{"text": "..."}` or `{"content": [{"type": "text", "text": ...},
{"type": "image", "media_type": "image/png", "data": "<base64>"}]}`, and
optionally `"mid_turn"` (`steer`, `queue`, `reject`, `interrupt`), and for a
new session `"workspace"` (a folder name under the server's workspace root,
default the session id) and `"settings"` (`SessionSettings`' fields). The
`Idempotency-Key` header makes a retry safe (`Host.send`'s key).

Workspaces are the server's folders: a client names one under the root the
server was given (`HttpConfig.workspaces`), never a path of its own; a name
that is absolute, has `..`, or other characters than letters, digits and
`._-` is refused (`BadWorkspace`, 400).
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any, Literal

import msgspec
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from cairn.actors.host.async_host import AsyncHost
from cairn.actors.host.async_turn import AsyncTurn
from cairn.actors.http.client_tools import ClientTools, canonical_schema, schema_name
from cairn.actors.http.feed import HEARTBEAT_S, SessionFeeds, session_events
from cairn.actors.http.problems import MAX_BODY_BYTES, Problem, convert, problem_of, read_json
from cairn.actors.http.views import (
    checkpoint_records,
    checkpoints_body,
    compact_body,
    interrupted_body,
    next_request_body,
)
from cairn.actors.session.settings import SessionSettings
from cairn.actors.session.stream import TurnResult, parse_position
from cairn.actors.tokens import TokenCounter
from cairn.actors.tools import ToolOutcome
from cairn.events.codec import validate_session_id
from cairn.events.errors import CairnError
from cairn.events.kinds import TurnStarted, UserMessage
from cairn.events.model import ImagePart, TextPart

#: how long a send waits for its message to be recorded before answering 202 without its seq
ACCEPT_WAIT_S = 30.0
_WORKSPACE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_ERROR_CODES = {"IdempotencyKeyReused": 409, "TurnRunning": 409, "WorkspaceMismatch": 409}


class HttpConfig(msgspec.Struct, frozen=True, kw_only=True):
    """The API's settings: the workspace root, the largest body, the streams' heartbeat."""

    workspaces: Path
    max_body_bytes: int = MAX_BODY_BYTES
    heartbeat_s: float = HEARTBEAT_S


class ReasonBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """`cancel` and `dismiss`: why, in words (recorded in the log)."""

    reason: str = ""


class ForkBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    target: str


class MessageBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """`POST /v1/sessions/{id}/messages`."""

    text: str | None = None
    content: tuple[TextPart | ImagePart, ...] | None = None
    workspace: str | None = None
    settings: SessionSettings | None = None
    #: a new session's tools that its client runs: tool schemas (JSON objects, each with a name)
    client_tools: tuple[dict[str, Any], ...] | None = None
    mid_turn: str = "steer"


class ToolResultBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """`POST /v1/sessions/{id}/tools/{call}`: what the client's tool produced."""

    content: str | tuple[TextPart | ImagePart, ...]
    status: Literal["ok", "error"] = "ok"


def result_body(result: TurnResult) -> dict[str, Any]:
    """A turn's result as JSON (`TurnResult`'s fields)."""
    body: dict[str, Any] = msgspec.to_builtins(result)
    body["ok"] = result.ok
    return body


class _Api:
    """The routes' shared parts: the host, the feeds, the settings."""

    def __init__(self, host: AsyncHost, config: HttpConfig, tools: ClientTools | None) -> None:
        self.host = host
        self.config = config
        self.tools = tools
        self.feeds = SessionFeeds()
        self.counter = TokenCounter()

    # -- the routes ----------------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        return JSONResponse({"ok": not self.feeds.closing.is_set()})

    async def sessions(self, request: Request) -> Response:
        return JSONResponse({"sessions": await self.host.sessions()})

    async def session(self, request: Request) -> Response:
        sid = _session_id(request)
        state = await self.host.state(sid)
        info = state.info
        if info is None:
            raise Problem(404, "UnknownSession", f"no session {sid} in the store")
        running = self.feeds.running(sid)
        return JSONResponse(
            {
                "session": sid,
                "model": info.model,
                "context_window": info.context_window,
                "max_output_tokens": info.max_output_tokens,
                "parent_session": info.parent_session,
                "last_seq": state.last_seq,
                "epoch": state.epoch,
                "open_turn": state.open_turn.turn_id if state.open_turn is not None else None,
                "turn_running": running is not None,
            }
        )

    async def send(self, request: Request) -> Response:
        sid = _session_id(request)
        body: MessageBody = convert(
            await read_json(request, limit=self.config.max_body_bytes), MessageBody, "a message"
        )
        wait = _flag(request, "wait")
        if (body.text is None) == (body.content is None):
            raise Problem(400, "BadBody", 'a message has either "text" or "content"')
        message = body.text if body.text is not None else body.content or ()
        key = request.headers.get("idempotency-key")
        settings = self._with_client_tools(body)
        workspace, made = await self._workspace(sid, body.workspace)
        try:
            turn = await self.host.send(
                sid,
                message,
                workspace=workspace,
                settings=settings,
                idempotency_key=key,
                mid_turn=body.mid_turn,  # type: ignore[arg-type]  # checked by the host (InputError)
            )
        except BaseException:
            if made is not None:  # a refused message leaves no folder behind either
                made.rmdir()
            raise
        self.feeds.started(sid, turn)
        if wait:
            return JSONResponse(result_body(_refused_or(await turn.result(None))))
        return JSONResponse(await self._accepted(sid, turn, queued=body.mid_turn == "queue"), status_code=202)

    async def events(self, request: Request) -> Response:
        sid = _session_id(request)
        after = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
        try:
            parse_position(after)
        except CairnError as exc:
            raise problem_of(exc) from None
        if not await self._exists(sid) and self.feeds.running(sid) is None:
            raise Problem(404, "UnknownSession", f"no session {sid} in the store")
        stream = session_events(
            self.host.host.journal,
            self.feeds,
            sid,
            after,
            heartbeat_s=self.config.heartbeat_s,
            images=_flag(request, "images"),
        )
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return StreamingResponse(stream, media_type="text/event-stream", headers=headers)

    async def transcript(self, request: Request) -> Response:
        sid = _session_id(request)
        after = _int_param(request, "after", 0)
        limit = _int_param(request, "limit", 100)
        page = await self.host.transcript(sid, after=after, limit=limit, images=_flag(request, "images"))
        return Response(msgspec.json.encode(page), media_type="application/json")

    async def cancel(self, request: Request) -> Response:
        sid = _session_id(request)
        body: ReasonBody = convert(
            await read_json(request, limit=self.config.max_body_bytes), ReasonBody, "cancel"
        )
        turn = self.feeds.running(sid)
        if turn is None:
            raise Problem(409, "NoTurnRunning", f"session {sid} runs no turn this server started")
        turn.cancel(body.reason)
        return JSONResponse(result_body(await turn.result(None)))

    async def waiting_tools(self, request: Request) -> Response:
        sid = _session_id(request)
        await self._known(sid)
        calls = await self.host.waiting_tools(sid)
        waiting = [{"call_id": c.id, "name": c.name, "arguments": c.arguments} for c in calls]
        return JSONResponse({"session": sid, "waiting": waiting})

    async def tool_result(self, request: Request) -> Response:
        sid = _session_id(request)
        call_id = request.path_params["call"]
        body: ToolResultBody = convert(
            await read_json(request, limit=self.config.max_body_bytes), ToolResultBody, "a tool result"
        )
        await self._known(sid)
        await self.host.resolve_tool(sid, call_id, ToolOutcome(content=body.content, status=body.status))
        return JSONResponse({"session": sid, "call_id": call_id, "accepted": True})

    async def context(self, request: Request) -> Response:
        sid = _session_id(request)
        await self._known(sid)
        return JSONResponse(next_request_body(sid, await self.host.next_request(sid), self.counter))

    async def checkpoints(self, request: Request) -> Response:
        sid = _session_id(request)
        await self._known(sid)
        journal = self.host.host.journal
        records = await asyncio.get_running_loop().run_in_executor(None, checkpoint_records, journal, sid)
        return JSONResponse(checkpoints_body(sid, records))

    async def compact(self, request: Request) -> Response:
        sid = _session_id(request)
        await read_json(request, limit=self.config.max_body_bytes)  # none expected; a bad one is refused
        await self._known(sid)
        result = await self.host.compact(sid)
        self.feeds.touched(sid)
        return JSONResponse(compact_body(result))

    async def fork(self, request: Request) -> Response:
        sid = _session_id(request)
        body: ForkBody = convert(await read_json(request, limit=self.config.max_body_bytes), ForkBody, "fork")
        try:
            validate_session_id(body.target)
        except CairnError as exc:
            raise problem_of(exc) from None
        last_seq = await self.host.fork(sid, body.target)
        return JSONResponse({"session": body.target, "source": sid, "last_seq": last_seq}, status_code=201)

    async def interrupted(self, request: Request) -> Response:
        return JSONResponse(interrupted_body(await self.host.interrupted_turns()))

    async def continue_turn(self, request: Request) -> Response:
        sid = _session_id(request)
        turn_id = request.path_params["turn"]
        await read_json(request, limit=self.config.max_body_bytes)
        turn = await self.host.continue_turn(sid, turn_id)
        self.feeds.started(sid, turn)
        if _flag(request, "wait"):
            return JSONResponse(result_body(_refused_or(await turn.result(None))))
        return JSONResponse(await self._accepted(sid, turn, queued=False), status_code=202)

    async def dismiss(self, request: Request) -> Response:
        sid = _session_id(request)
        turn_id = request.path_params["turn"]
        body: ReasonBody = convert(
            await read_json(request, limit=self.config.max_body_bytes), ReasonBody, "dismiss"
        )
        await self.host.dismiss_interrupted(sid, turn_id, body.reason)
        self.feeds.touched(sid)
        return JSONResponse({"session": sid, "turn_id": turn_id, "dismissed": True})

    # -- inside --------------------------------------------------------------------------------

    def _with_client_tools(self, body: MessageBody) -> SessionSettings | None:
        """The settings of a new session with its client tools added to the server's (`BadTools`, 400,
        for a schema without a name, a name twice, or one of the server's own)."""
        if not body.client_tools:
            return body.settings
        if self.tools is None:
            raise Problem(400, "BadTools", "this server runs no client tools")
        schemas = tuple(canonical_schema(schema) for schema in body.client_tools)
        names = [schema_name(schema) for schema in schemas]
        if not all(names) or len(set(names)) != len(names):
            raise Problem(400, "BadTools", "every client tool has a name of its own (function.name or name)")
        taken = sorted(self.tools.server_names.intersection(n for n in names if n))
        if taken:
            raise Problem(400, "BadTools", f"the server runs tools of these names itself: {', '.join(taken)}")
        base = body.settings if body.settings is not None else self.host.host.settings
        own = base.tool_schemas if body.settings is not None and base.tool_schemas else self.tools.schemas
        return msgspec.structs.replace(base, tool_schemas=(*own, *schemas))

    async def _known(self, sid: str) -> None:
        """`UnknownSession` (404) for a session with no events, before the host is asked (asking
        would load it, and for some calls make it)."""
        if not await self._exists(sid):
            raise Problem(404, "UnknownSession", f"no session {sid} in the store")

    async def _exists(self, sid: str) -> bool:
        journal = self.host.host.journal
        return await asyncio.get_running_loop().run_in_executor(None, journal.last_seq, sid) > 0

    async def _workspace(self, sid: str, name: str | None) -> tuple[Path | None, Path | None]:
        """The folder a new session works in (None for a session that exists and names none), and
        that folder again when it was made here (else None). A name is checked before anything else,
        so a bad one writes nothing."""
        if name is not None and (not _WORKSPACE_NAME.fullmatch(name) or ".." in name):
            raise Problem(
                400, "BadWorkspace", f"a workspace is a folder name ([A-Za-z0-9._-], no '..'), not {name!r}"
            )
        if name is None and await self._exists(sid):
            return None, None
        folder = self.config.workspaces / (name if name is not None else sid)

        def make() -> Path | None:
            if folder.is_dir():
                return None
            folder.mkdir(parents=True)
            return folder

        return folder, await asyncio.get_running_loop().run_in_executor(None, make)

    async def _accepted(self, sid: str, turn: AsyncTurn, *, queued: bool) -> dict[str, Any]:
        """202's body: where the turn's events begin in the session's stream, once its message is
        recorded (not waited for when queued behind a running turn)."""
        answer: dict[str, Any] = {"session": sid, "status": "accepted", "message_seq": None, "turn_id": None}
        if not queued:
            try:
                async with asyncio.timeout(ACCEPT_WAIT_S):
                    async for item in turn.events(None):
                        event = getattr(item, "event", None)
                        if isinstance(event, UserMessage):
                            answer["message_seq"] = item.seq  # type: ignore[union-attr]
                        elif isinstance(event, TurnStarted):
                            answer["turn_id"] = event.turn_id
                        if answer["message_seq"] is not None and not isinstance(event, UserMessage):
                            break
            except TimeoutError:
                pass
        if turn.done():
            result = _refused_or(await turn.result(None))
            answer.update(status=result.status, result=result_body(result))
        if answer["message_seq"] is not None:
            answer["events"] = f"/v1/sessions/{sid}/events?after={answer['message_seq'] - 1}"
        return answer


def _refused_or(result: TurnResult) -> TurnResult:
    """`result`, unless the message was refused (`rejected`): then the problem it is answered with."""
    if result.status == "rejected":
        raise Problem(
            _ERROR_CODES.get(result.error_class, 400), result.error_class or "Rejected", result.error
        )
    return result


def _session_id(request: Request) -> str:
    sid = request.path_params["session"]
    try:
        return validate_session_id(sid)
    except CairnError as exc:
        raise problem_of(exc) from None


def _flag(request: Request, name: str) -> bool:
    value = request.query_params.get(name, "false").lower()
    if value not in ("true", "false", "1", "0"):
        raise Problem(400, "BadQuery", f"{name} is true or false, not {value!r}")
    return value in ("true", "1")


def _int_param(request: Request, name: str, default: int) -> int:
    value = request.query_params.get(name)
    if value is None:
        return default
    if not (value.isascii() and value.isdigit()):
        raise Problem(400, "BadQuery", f"{name} is a non-negative integer, not {value!r}")
    return int(value)


async def _problem(request: Request, exc: Exception) -> Response:
    if isinstance(exc, Problem):
        return exc.response()
    if isinstance(exc, CairnError):
        return problem_of(exc).response()
    if isinstance(exc, HTTPException):
        code = {404: "NotFound", 405: "MethodNotAllowed"}.get(exc.status_code, "HttpError")
        return Problem(exc.status_code, code, str(exc.detail), dict(exc.headers or {})).response()
    raise exc


def http_app(host: AsyncHost, config: HttpConfig, tools: ClientTools | None = None) -> Starlette:
    """The API over `host` (see the module doc); `app.state.feeds.close()` ends its streams.

    `tools`: the host's executor when it is a `ClientTools` (sessions may then declare client
    tools); its `journal` is set here."""
    if tools is not None:
        tools.journal = host.host.journal
    api = _Api(host, config, tools)
    routes = [
        Route("/v1/health", api.health, methods=["GET"]),
        Route("/v1/sessions", api.sessions, methods=["GET"]),
        Route("/v1/sessions/{session}", api.session, methods=["GET"]),
        Route("/v1/sessions/{session}/messages", api.send, methods=["POST"]),
        Route("/v1/sessions/{session}/events", api.events, methods=["GET"]),
        Route("/v1/sessions/{session}/transcript", api.transcript, methods=["GET"]),
        Route("/v1/sessions/{session}/cancel", api.cancel, methods=["POST"]),
        Route("/v1/sessions/{session}/tools", api.waiting_tools, methods=["GET"]),
        Route("/v1/sessions/{session}/tools/{call}", api.tool_result, methods=["POST"]),
        Route("/v1/sessions/{session}/context", api.context, methods=["GET"]),
        Route("/v1/sessions/{session}/checkpoints", api.checkpoints, methods=["GET"]),
        Route("/v1/sessions/{session}/compact", api.compact, methods=["POST"]),
        Route("/v1/sessions/{session}/fork", api.fork, methods=["POST"]),
        Route("/v1/interrupted", api.interrupted, methods=["GET"]),
        Route("/v1/sessions/{session}/turns/{turn}/continue", api.continue_turn, methods=["POST"]),
        Route("/v1/sessions/{session}/turns/{turn}/dismiss", api.dismiss, methods=["POST"]),
    ]
    handlers = {Problem: _problem, CairnError: _problem, HTTPException: _problem}
    app = Starlette(routes=routes, exception_handlers=handlers)
    app.state.feeds = api.feeds
    return app
