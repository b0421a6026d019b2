"""The HTTP API of a host (`http_app`): sessions, messages, turns and their live event streams.

An ASGI application (Starlette) over an `AsyncHost`; `cairn serve --http`
serves it with uvicorn (`serve.py`). Every body and answer is JSON, every
refusal `application/problem+json` (`problems.py`), checked whole before
the host is asked anything, so a refused request writes nothing.

| route                                  | what                                                 |
|----------------------------------------|------------------------------------------------------|
| `GET  /v1/health`                      | `{"ok": true}` while the host serves                 |
| `GET  /v1/openapi.json`                | the OpenAPI document (`openapi.py`)                  |
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

With tenants (`HttpConfig.tenants`, `tenants.py`) every request carries a
tenant's bearer token (else 401), and a tenant sees only its own sessions
(`base.Caller`). The routes are in two parts: the sessions, messages and
streams here, the operations on a session in `operations.py`.
"""

from __future__ import annotations

import asyncio

import msgspec
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from cairn.actors.host.async_host import AsyncHost
from cairn.actors.host.ops import CancelOp, SendOp
from cairn.actors.http.base import ApiBase, HttpConfig, MessageBody, ReasonBody, flag, int_param, refused_or
from cairn.actors.http.client_tools import ClientTools, canonical_schema, schema_name
from cairn.actors.http.feed import EventStream, session_events
from cairn.actors.http.openapi import checked_in
from cairn.actors.http.operations import OperationRoutes
from cairn.actors.http.places import LocalPlaces
from cairn.actors.http.problems import Problem, problem_of
from cairn.actors.session.settings import SessionSettings
from cairn.actors.session.stream import parse_position
from cairn.events.errors import CairnError

__all__ = ["HttpConfig", "http_app"]


class SessionRoutes(ApiBase):
    """Sessions, messages, event streams, transcripts and cancelling (the module doc)."""

    async def health(self, request: Request) -> Response:
        return JSONResponse({"ok": not self.feeds.closing.is_set()})

    async def openapi(self, request: Request) -> Response:
        return Response(checked_in(), media_type="application/json")

    async def sessions(self, request: Request) -> Response:
        caller = self.caller(request)
        ids = [caller.name(sid) for sid in await self.host.sessions() if caller.owns(sid)]
        return JSONResponse({"sessions": ids})

    async def session(self, request: Request) -> Response:
        caller, sid = self.session_of(request)
        await self.known(caller, sid)
        state, here = await self.places.state(sid)
        info = state.info
        if info is None:
            raise Problem(404, "UnknownSession", f"no session {caller.name(sid)} in the store")
        about = {
            "session": sid,
            "model": info.model,
            "context_window": info.context_window,
            "max_output_tokens": info.max_output_tokens,
            "parent_session": info.parent_session,
            "last_seq": state.last_seq,
            "epoch": state.epoch,
            "open_turn": state.open_turn.turn_id if state.open_turn is not None else None,
            "turn_running": self.feeds.running(sid) is not None or (not here and state.open_turn is not None),
        }
        return JSONResponse(caller.shown(about))

    async def send(self, request: Request) -> Response:
        caller, sid = self.session_of(request)
        limit = self.config.max_body_bytes
        for tenants_cap in (caller.tenant.max_message_bytes, caller.tenant.message_bytes_per_minute):
            limit = min(limit, tenants_cap or limit)  # a body over its minute's bytes would never fit
        body, size = await self.body_sized(request, MessageBody, "a message", limit=limit)
        wait = flag(request, "wait")
        if (body.text is None) == (body.content is None):
            raise Problem(400, "BadBody", 'a message has either "text" or "content"')
        message = body.text if body.text is not None else body.content or ()
        key = request.headers.get("idempotency-key")
        settings = self._with_client_tools(body)
        self.admit_turn(caller, sid, size)
        workspace, made = await self.workspace(caller, sid, body.workspace)

        async def here() -> Response:
            # a message that waits for a running turn (queued, or steering it: recorded before that
            # turn's next request) is not waited for: it may take as long as the turn's tool
            running = self.feeds.running(sid) is not None or self.places.running(sid) is not None
            behind = body.mid_turn == "queue" or (body.mid_turn == "steer" and running)
            turn = await self.host.send(
                sid,
                message,
                workspace=workspace,
                settings=settings,
                idempotency_key=key,
                mid_turn=body.mid_turn,  # type: ignore[arg-type]  # checked by the host (InputError)
            )
            self.feeds.started(sid, turn)
            self.places.track(sid, turn)
            if wait:
                return JSONResponse(caller.result(refused_or(await turn.result(None))))
            answer = await self.accepted(caller, sid, turn, queued=behind)
            return JSONResponse(answer, status_code=202)

        op = SendOp(
            content=message,
            workspace=str(workspace) if workspace is not None else None,
            settings=settings,
            idempotency_key=key,
            mid_turn=body.mid_turn,
            wait=wait,
        )
        try:
            return await self.places.on_holder(
                sid, op, here, lambda done: self.remote_accepted(caller, sid, done, wait=wait)
            )
        except BaseException:
            if made is not None:  # a refused message leaves no folder behind either
                made.rmdir()
            raise

    async def events(self, request: Request) -> Response:
        caller, sid = self.session_of(request)
        after = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
        try:
            parse_position(after)
        except CairnError as exc:
            raise problem_of(exc) from None
        if not await self.exists(sid) and self.feeds.running(sid) is None:
            raise Problem(404, "UnknownSession", f"no session {caller.name(sid)} in the store")
        self.feeds.follow(self.host.host)
        stream = session_events(
            self.host.host.journal,
            self.feeds,
            sid,
            after,
            heartbeat_s=self.config.heartbeat_s,
            images=flag(request, "images"),
            shown=caller.shown,
            viewer=caller.prefix,
        )
        stream = self.places.watched(sid, self.feeds, stream)
        return EventStream(stream, session=sid, write_timeout_s=self.config.write_timeout_s)

    async def transcript(self, request: Request) -> Response:
        caller, sid = self.session_of(request)
        after = int_param(request, "after", 0)
        limit = int_param(request, "limit", 100)
        await self.known(caller, sid)
        page = await self.host.transcript(sid, after=after, limit=limit, images=flag(request, "images"))
        return JSONResponse(caller.shown(msgspec.to_builtins(page)))

    async def cancel(self, request: Request) -> Response:
        caller, sid = self.session_of(request)
        body = await self.body(request, ReasonBody, "cancel")
        turn = self.feeds.running(sid)
        if turn is not None:
            turn.cancel(body.reason)
            return JSONResponse(caller.result(await turn.result(None)))

        async def here() -> Response:  # a turn of this server that the API did not start, or none
            found = self.places.running(sid)
            if found is None:
                await self.known(caller, sid)  # 404 for no such session, as on every other route
                raise Problem(409, "NoTurnRunning", f"session {caller.name(sid)} runs no turn")
            found.cancel(body.reason)
            ended = await asyncio.get_running_loop().run_in_executor(None, found.result, None)
            return JSONResponse(caller.result(ended))

        return await self.places.on_holder(
            sid, CancelOp(reason=body.reason), here, lambda ended: JSONResponse(caller.result(ended))
        )

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


class _Api(SessionRoutes, OperationRoutes):
    """Every route (the module doc)."""


async def _problem(request: Request, exc: Exception) -> Response:
    if isinstance(exc, Problem):
        return exc.response()
    if isinstance(exc, CairnError):
        return problem_of(exc).response()
    if isinstance(exc, HTTPException):
        code = {404: "NotFound", 405: "MethodNotAllowed"}.get(exc.status_code, "HttpError")
        return Problem(exc.status_code, code, str(exc.detail), dict(exc.headers or {})).response()
    raise exc


def http_app(
    host: AsyncHost, config: HttpConfig, tools: ClientTools | None = None, places: LocalPlaces | None = None
) -> Starlette:
    """The API over `host` (see the module doc); `app.state.feeds.close()` ends its streams.

    `tools`: the host's executor when it is a `ClientTools` (sessions may then declare client
    tools); its `journal` is set here. `places`: where operations on a session run (default
    `LocalPlaces`: on `host`; `ClusterPlaces` on a cluster)."""
    if tools is not None:
        tools.journal = host.host.journal
    api = _Api(host, config, tools, places)
    routes = [
        Route("/v1/health", api.health, methods=["GET"]),
        Route("/v1/openapi.json", api.openapi, methods=["GET"]),
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
