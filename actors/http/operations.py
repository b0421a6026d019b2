"""The HTTP API's operations on a session: client-tool results, the next request, checkpoints, compact
now, fork, and the recovery of interrupted turns (the routes table is in `app.py`)."""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from cairn.actors.http.base import ApiBase, ForkBody, ReasonBody, ToolResultBody, flag, refused_or
from cairn.actors.http.problems import read_json
from cairn.actors.http.views import (
    checkpoint_records,
    checkpoints_body,
    compact_body,
    interrupted_body,
    next_request_body,
)
from cairn.actors.tools import ToolOutcome


class OperationRoutes(ApiBase):
    """The operations on one session (the module doc)."""

    async def waiting_tools(self, request: Request) -> Response:
        caller, sid = self.session_of(request)
        await self.known(caller, sid)
        calls = await self.host.waiting_tools(sid)
        waiting = [{"call_id": c.id, "name": c.name, "arguments": c.arguments} for c in calls]
        return JSONResponse({"session": caller.name(sid), "waiting": waiting})

    async def tool_result(self, request: Request) -> Response:
        caller, sid = self.session_of(request)
        call_id = request.path_params["call"]
        body = await self.body(request, ToolResultBody, "a tool result")
        await self.known(caller, sid)
        await self.host.resolve_tool(sid, call_id, ToolOutcome(content=body.content, status=body.status))
        return JSONResponse({"session": caller.name(sid), "call_id": call_id, "accepted": True})

    async def context(self, request: Request) -> Response:
        caller, sid = self.session_of(request)
        await self.known(caller, sid)
        body = next_request_body(sid, await self.host.next_request(sid), self.counter)
        return JSONResponse(caller.shown(body))

    async def checkpoints(self, request: Request) -> Response:
        caller, sid = self.session_of(request)
        await self.known(caller, sid)
        journal = self.host.host.journal
        records = await asyncio.get_running_loop().run_in_executor(None, checkpoint_records, journal, sid)
        body = checkpoints_body(caller.name(sid), records)
        body["checkpoints"] = [caller.shown(view) for view in body["checkpoints"]]
        return JSONResponse(body)

    async def compact(self, request: Request) -> Response:
        caller, sid = self.session_of(request)
        await read_json(request, limit=self.config.max_body_bytes)  # none expected; a bad one is refused
        await self.known(caller, sid)
        result = await self.host.compact(sid)
        self.feeds.touched(sid)
        body = caller.shown(compact_body(result))
        if body["record"] is not None:
            body["record"] = caller.shown(body["record"])
        return JSONResponse(body)

    async def fork(self, request: Request) -> Response:
        caller, sid = self.session_of(request)
        body = await self.body(request, ForkBody, "fork")
        target = caller.sid(body.target)
        await self.known(caller, sid)
        last_seq = await self.host.fork(sid, target)
        answer = {"session": target, "source": sid, "last_seq": last_seq}
        return JSONResponse(caller.shown(answer), status_code=201)

    async def interrupted(self, request: Request) -> Response:
        caller = self.caller(request)
        turns = [turn for turn in await self.host.interrupted_turns() if caller.owns(turn.session)]
        body = interrupted_body(turns)
        body["interrupted"] = [caller.shown(turn) for turn in body["interrupted"]]
        return JSONResponse(body)

    async def continue_turn(self, request: Request) -> Response:
        caller, sid = self.session_of(request)
        turn_id = request.path_params["turn"]
        await read_json(request, limit=self.config.max_body_bytes)
        await self.known(caller, sid)
        self.admit_turn(caller, sid)
        turn = await self.host.continue_turn(sid, turn_id)
        self.feeds.started(sid, turn)
        if flag(request, "wait"):
            return JSONResponse(caller.result(refused_or(await turn.result(None))))
        return JSONResponse(await self.accepted(caller, sid, turn, queued=False), status_code=202)

    async def dismiss(self, request: Request) -> Response:
        caller, sid = self.session_of(request)
        turn_id = request.path_params["turn"]
        body = await self.body(request, ReasonBody, "dismiss")
        await self.known(caller, sid)
        await self.host.dismiss_interrupted(sid, turn_id, body.reason)
        self.feeds.touched(sid)
        return JSONResponse({"session": caller.name(sid), "turn_id": turn_id, "dismissed": True})
