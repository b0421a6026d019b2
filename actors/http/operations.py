"""The HTTP API's operations on a session: client-tool results, the next request, checkpoints, compact
now, fork, and the recovery of interrupted turns (the routes table is in `app.py`)."""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from cairn.actors.host.ops import (
    CompactOp,
    ContinueOp,
    DismissOp,
    NextRequestOp,
    ResolveToolOp,
    WaitingToolsOp,
)
from cairn.actors.http.base import ApiBase, ForkBody, ReasonBody, ToolResultBody, flag, refused_or
from cairn.actors.http.problems import read_json
from cairn.actors.http.views import (
    checkpoint_records,
    checkpoints_body,
    compact_body,
    interrupted_body,
    next_request_body,
)
from cairn.actors.session.manual import CompactResult
from cairn.actors.session.request import AssembledRequest
from cairn.actors.tools import ToolOutcome
from cairn.events.model import ToolCall


class OperationRoutes(ApiBase):
    """The operations on one session (the module doc)."""

    async def waiting_tools(self, request: Request) -> Response:
        caller, sid = self.session_of(request)
        await self.known(caller, sid)

        def answer(calls: tuple[ToolCall, ...]) -> Response:
            waiting = [{"call_id": c.id, "name": c.name, "arguments": c.arguments} for c in calls]
            return JSONResponse({"session": caller.name(sid), "waiting": waiting})

        async def here() -> Response:
            return answer(await self.host.waiting_tools(sid))

        return await self.places.on_holder(sid, WaitingToolsOp(), here, answer)

    async def tool_result(self, request: Request) -> Response:
        caller, sid = self.session_of(request)
        call_id = request.path_params["call"]
        body = await self.body(request, ToolResultBody, "a tool result")
        await self.known(caller, sid)
        outcome = ToolOutcome(content=body.content, status=body.status)

        def answer(_: None = None) -> Response:
            return JSONResponse({"session": caller.name(sid), "call_id": call_id, "accepted": True})

        async def here() -> Response:
            await self.host.resolve_tool(sid, call_id, outcome)
            return answer()

        return await self.places.on_holder(sid, ResolveToolOp(call_id=call_id, outcome=outcome), here, answer)

    async def context(self, request: Request) -> Response:
        caller, sid = self.session_of(request)
        await self.known(caller, sid)

        def answer(assembled: AssembledRequest) -> Response:
            return JSONResponse(caller.shown(next_request_body(sid, assembled, self.counter)))

        async def here() -> Response:
            return answer(await self.host.next_request(sid))

        return await self.places.on_holder(sid, NextRequestOp(), here, answer)

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

        def answer(result: CompactResult) -> Response:
            self.feeds.touched(sid)
            body = caller.shown(compact_body(result))
            if body["record"] is not None:
                body["record"] = caller.shown(body["record"])
            return JSONResponse(body)

        async def here() -> Response:
            return answer(await self.host.compact(sid))

        return await self.places.on_holder(sid, CompactOp(), here, answer)

    async def fork(self, request: Request) -> Response:
        caller, sid = self.session_of(request)
        body = await self.body(request, ForkBody, "fork")
        target = caller.sid(body.target)
        await self.known(caller, sid)
        last_seq = await self.places.fork(sid, target)
        answer = {"session": target, "source": sid, "last_seq": last_seq}
        return JSONResponse(caller.shown(answer), status_code=201)

    async def interrupted(self, request: Request) -> Response:
        caller = self.caller(request)
        turns = [turn for turn in await self.places.interrupted() if caller.owns(turn.session)]
        body = interrupted_body(turns)
        body["interrupted"] = [caller.shown(turn) for turn in body["interrupted"]]
        return JSONResponse(body)

    async def continue_turn(self, request: Request) -> Response:
        caller, sid = self.session_of(request)
        turn_id = request.path_params["turn"]
        await read_json(request, limit=self.config.max_body_bytes)
        await self.known(caller, sid)
        self.admit_turn(caller, sid)
        wait = flag(request, "wait")

        async def here() -> Response:
            turn = await self.host.continue_turn(sid, turn_id)
            self.feeds.started(sid, turn)
            self.places.track(sid, turn)
            if wait:
                return JSONResponse(caller.result(refused_or(await turn.result(None))))
            return JSONResponse(await self.accepted(caller, sid, turn, queued=False), status_code=202)

        return await self.places.on_holder(
            sid,
            ContinueOp(turn_id=turn_id, wait=wait),
            here,
            lambda done: self.remote_accepted(caller, sid, done, wait=wait),
        )

    async def dismiss(self, request: Request) -> Response:
        caller, sid = self.session_of(request)
        turn_id = request.path_params["turn"]
        body = await self.body(request, ReasonBody, "dismiss")
        await self.known(caller, sid)

        def answer(_: None = None) -> Response:
            self.feeds.touched(sid)
            return JSONResponse({"session": caller.name(sid), "turn_id": turn_id, "dismissed": True})

        async def here() -> Response:
            await self.host.dismiss_interrupted(sid, turn_id, body.reason)
            return answer()

        return await self.places.on_holder(sid, DismissOp(turn_id=turn_id, reason=body.reason), here, answer)
