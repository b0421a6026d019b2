"""What the HTTP API's routes share: the settings, the bodies, the caller (tenant) and the helpers.

`Caller` is the tenant a request acts for (`tenants.py`): it turns the
session id a client names into the store's (`acme:s1` for acme's `s1`) and
back in every answer, so a client only ever sees its own ids. `ApiBase` holds
the host, the event feeds and the settings, and the steps several routes
take: resolving the caller, checking that a session exists, the workspace
folder of a new session, the 202 of a send.
"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

import msgspec
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from cairn.actors.host.async_host import AsyncHost
from cairn.actors.host.async_turn import AsyncTurn
from cairn.actors.host.ops import ACCEPT_WAIT_S, Opening
from cairn.actors.http.client_tools import ClientTools
from cairn.actors.http.feed import HEARTBEAT_S, WRITE_TIMEOUT_S, SessionFeeds
from cairn.actors.http.places import LocalPlaces
from cairn.actors.http.problems import MAX_BODY_BYTES, Problem, convert, problem_of, read_json_sized
from cairn.actors.http.tenants import NOBODY, RollingQuota, Tenant, Tenants
from cairn.actors.session.settings import SessionSettings
from cairn.actors.session.stream import TurnResult
from cairn.actors.tokens import TokenCounter
from cairn.events.codec import validate_session_id
from cairn.events.errors import CairnError
from cairn.events.model import ImagePart, TextPart

if TYPE_CHECKING:
    from cairn.actors.host.ops import Accepted

T = TypeVar("T")

#: `Retry-After` of a tenant at its live-session limit (sessions leave by idle passivation)
LIVE_RETRY_S = 5
_WORKSPACE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_ERROR_CODES = {
    "IdempotencyKeyReused": 409,
    "TurnRunning": 409,
    "WorkspaceMismatch": 409,
    "NotInterrupted": 409,  # as dismiss answers it (`problems._CONFLICTS`)
}
#: fields of an answer that name a session (mapped back to the client's ids)
_SESSION_FIELDS = ("session", "parent_session", "source")


class HttpConfig(msgspec.Struct, frozen=True, kw_only=True):
    """The API's settings: the workspace root, the largest body, the streams' heartbeat and write
    timeout, and the tenants (None: one unnamed tenant, no tokens; served on loopback only)."""

    workspaces: Path
    max_body_bytes: int = MAX_BODY_BYTES
    heartbeat_s: float = HEARTBEAT_S
    #: how long one write to an event stream's client may wait (a client that stopped reading)
    write_timeout_s: float = WRITE_TIMEOUT_S
    tenants: Tenants | None = None


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


class Caller:
    """The tenant a request acts for, and its session ids as the store has them."""

    def __init__(self, tenant: Tenant) -> None:
        self.tenant = tenant
        self.prefix = tenant.prefix

    def sid(self, name: str) -> str:
        """The store's id of the caller's session `name` (`InvalidSessionId`, 400, for a bad one)."""
        try:
            validate_session_id(name)
            return validate_session_id(self.prefix + name)
        except CairnError as exc:
            raise problem_of(exc) from None

    def owns(self, stored: str) -> bool:
        return stored.startswith(self.prefix)

    def name(self, stored: str) -> str:
        """The caller's id of the store's session `stored`."""
        return stored[len(self.prefix) :] if self.prefix and stored.startswith(self.prefix) else stored

    def shown(self, body: dict[str, Any]) -> dict[str, Any]:
        """`body` with the session ids it names as the caller knows them."""
        if self.prefix:
            for key in _SESSION_FIELDS:
                value = body.get(key)
                if isinstance(value, str):
                    body[key] = self.name(value)
        return body

    def result(self, result: TurnResult) -> dict[str, Any]:
        """A turn's result as JSON (`TurnResult`'s fields, and `ok`)."""
        body: dict[str, Any] = msgspec.to_builtins(result)
        body["ok"] = result.ok
        return self.shown(body)


def refused_or(result: TurnResult) -> TurnResult:
    """`result`, unless the message was refused (`rejected`): then the problem it is answered with."""
    if result.status == "rejected":
        detail = result.error
        if result.error_class == "WorkspaceMismatch":  # its text names the server's own paths
            detail = "the session works in another workspace than the one named"
        raise Problem(_ERROR_CODES.get(result.error_class, 400), result.error_class or "Rejected", detail)
    return result


def flag(request: Request, name: str) -> bool:
    value = request.query_params.get(name, "false").lower()
    if value not in ("true", "false", "1", "0"):
        raise Problem(400, "BadQuery", f"{name} is true or false, not {value!r}")
    return value in ("true", "1")


def int_param(request: Request, name: str, default: int) -> int:
    value = request.query_params.get(name)
    if value is None:
        return default
    if not (value.isascii() and value.isdigit()):
        raise Problem(400, "BadQuery", f"{name} is a non-negative integer, not {value!r}")
    return int(value)


class ApiBase:
    """The routes' shared parts: the host, the feeds, the settings, the tenants' turn rates."""

    def __init__(
        self,
        host: AsyncHost,
        config: HttpConfig,
        tools: ClientTools | None,
        places: LocalPlaces | None = None,
    ) -> None:
        self.host = host
        #: where operations on a session run: here, or on a cluster's holder of it
        self.places = places if places is not None else LocalPlaces(host)
        self.config = config
        self.tools = tools
        self.feeds = SessionFeeds()
        self.counter = TokenCounter()
        #: per tenant: its turns and its message bytes of the last minute
        self._quotas: dict[str, tuple[RollingQuota, RollingQuota]] = {}

    def caller(self, request: Request) -> Caller:
        """The tenant of the request's bearer token (`Unauthorized`, 401, for none or a wrong one)."""
        tenants = self.config.tenants
        if tenants is None:
            return Caller(NOBODY)
        tenant = tenants.resolve(request.headers.get("authorization"))
        if tenant is None:
            raise Problem(
                401, "Unauthorized", "a bearer token of a tenant is needed", {"WWW-Authenticate": "Bearer"}
            )
        return Caller(tenant)

    async def body(self, request: Request, kind: type[T], what: str, *, limit: int | None = None) -> T:
        """The request's JSON body as `kind`, read up to `limit` (default `max_body_bytes`): 413, 415
        or 400 (`problems.read_json`, `problems.convert`) before anything else is done."""
        return (await self.body_sized(request, kind, what, limit=limit))[0]

    async def body_sized(
        self, request: Request, kind: type[T], what: str, *, limit: int | None = None
    ) -> tuple[T, int]:
        """`body`, with the number of bytes the body had."""
        limit = self.config.max_body_bytes if limit is None else limit
        value, size = await read_json_sized(request, limit=limit)
        return cast(T, convert(value, kind, what)), size

    def session_of(self, request: Request) -> tuple[Caller, str]:
        """The caller and the store's id of the session the path names."""
        caller = self.caller(request)
        self.feeds.follow(self.host.host)  # once: from then on `heads` knows every append's session
        return caller, caller.sid(request.path_params["session"])

    def admit_turn(self, caller: Caller, sid: str, message_bytes: int = 0) -> None:
        """The tenant's limits on starting a turn, each 429 with `Retry-After`: `TooManySessions`
        (its live sessions, for a session not live now), `TooManyTurns` (turns started in the last
        minute), `TooManyMessageBytes` (message bytes sent in the last minute). A refused turn
        spends nothing; an admitted one spends a turn and its bytes."""
        tenant = caller.tenant
        if tenant.max_live_sessions and sid not in self.host.live_sessions:
            live = sum(1 for s in self.host.live_sessions if caller.owns(s))
            if live >= tenant.max_live_sessions:
                why = f"tenant {tenant.name} has {live} live sessions, its limit"
                raise Problem(429, "TooManySessions", why, {"Retry-After": str(LIVE_RETRY_S)})
        turns, data = self._quotas.setdefault(
            tenant.name,
            (RollingQuota(tenant.turns_per_minute), RollingQuota(tenant.message_bytes_per_minute)),
        )
        now_ms = int(time.time() * 1000)
        wait_s = turns.wait_s(now_ms)
        if wait_s:
            why = (
                f"tenant {tenant.name} started {tenant.turns_per_minute} turns in the last minute, its limit"
            )
            raise Problem(429, "TooManyTurns", why, {"Retry-After": str(wait_s)})
        wait_s = data.wait_s(now_ms, message_bytes)
        if wait_s:
            why = (
                f"tenant {tenant.name}'s messages of the last minute and this one's {message_bytes} bytes"
                f" are over its {tenant.message_bytes_per_minute} bytes a minute"
            )
            raise Problem(429, "TooManyMessageBytes", why, {"Retry-After": str(wait_s)})
        turns.take(now_ms)
        data.take(now_ms, message_bytes)

    async def known(self, caller: Caller, sid: str) -> None:
        """`UnknownSession` (404) for a session with no events, before the host is asked (asking
        would load it, and for some calls make it): the same answer for another tenant's."""
        if not await self.exists(sid):
            raise Problem(404, "UnknownSession", f"no session {caller.name(sid)} in the store")

    async def exists(self, sid: str) -> bool:
        """Whether the session has events: known without a read when the host appended to it since
        this server began (`SessionFeeds.heads`), else read from the log (on a thread)."""
        if self.feeds.heads.get(sid):
            return True
        journal = self.host.host.journal
        return await asyncio.get_running_loop().run_in_executor(None, journal.last_seq, sid) > 0

    async def workspace(self, caller: Caller, sid: str, name: str | None) -> tuple[Path | None, Path | None]:
        """The folder a new session works in (None for a session that exists and names none), and
        that folder again when it was made here (else None): under the tenant's own folder. A name is
        checked before anything else, so a bad one writes nothing."""
        if name is not None and (not _WORKSPACE_NAME.fullmatch(name) or ".." in name):
            raise Problem(
                400, "BadWorkspace", f"a workspace is a folder name ([A-Za-z0-9._-], no '..'), not {name!r}"
            )
        if name is None and await self.exists(sid):
            return None, None
        root = self.config.workspaces / caller.tenant.name if caller.tenant.name else self.config.workspaces
        folder = root / (name if name is not None else caller.name(sid))
        shown = name if name is not None else caller.name(sid)

        def make() -> Path | None:
            # a link under the folder of workspaces may point anywhere: what it resolves to must stay
            # under that folder (a client names a folder there, never a path of its own)
            if not folder.resolve().is_relative_to(self.config.workspaces.resolve()):
                raise Problem(
                    400, "BadWorkspace", f"workspace {shown!r} leads outside the folder of workspaces"
                )
            if folder.is_dir():
                return None
            try:
                folder.mkdir(parents=True)
            except FileExistsError:
                raise Problem(
                    400, "BadWorkspace", f"workspace {shown!r} is taken by a file, not a folder"
                ) from None
            return folder

        return folder, await asyncio.get_running_loop().run_in_executor(None, make)

    async def accepted(self, caller: Caller, sid: str, turn: AsyncTurn, *, queued: bool) -> dict[str, Any]:
        """202's body: where the turn's events begin in the session's stream, once its message is
        recorded (not waited for when queued behind a running turn)."""
        opening = Opening()
        if not queued:
            try:
                async with asyncio.timeout(ACCEPT_WAIT_S):
                    async for item in turn.events(None):
                        if opening.take(item):
                            break
            except TimeoutError:
                pass
        result = await turn.result(None) if turn.done() else None
        # a message queued behind a running turn has no seq yet: its events come after the session's
        # end as it is now (the rest of the running turn first)
        head = self.feeds.heads.get(sid) if opening.message_seq is None else None
        return accepted_body(caller, sid, opening.message_seq, opening.turn_id, result, after=head)

    def remote_accepted(self, caller: Caller, sid: str, accepted: Accepted, *, wait: bool) -> Response:
        """The answer to a send (or continue) that the session's holder on a cluster ran: 202 as
        `accepted`'s, or the result (`wait`)."""
        if wait:
            assert accepted.result is not None
            return JSONResponse(caller.result(refused_or(accepted.result)))
        return JSONResponse(
            accepted_body(caller, sid, accepted.message_seq, accepted.turn_id, accepted.result),
            status_code=202,
        )


def accepted_body(
    caller: Caller,
    sid: str,
    message_seq: int | None,
    turn_id: str | None,
    result: TurnResult | None,
    *,
    after: int | None = None,
) -> dict[str, Any]:
    """202's body: the message's seq and turn (None: not known yet), the result when the turn ended,
    and where the turn's events begin in the session's stream (for a message not recorded yet, the
    stream from `after`, the session's last seq when it was accepted)."""
    name = caller.name(sid)
    answer: dict[str, Any] = {
        "session": name,
        "status": "accepted",
        "message_seq": message_seq,
        "turn_id": turn_id,
    }
    if result is not None:
        ended = refused_or(result)
        answer.update(status=ended.status, result=caller.result(ended))
    if message_seq is not None:
        answer["events"] = f"/v1/sessions/{name}/events?after={message_seq - 1}"
    elif after is not None:
        answer["events"] = f"/v1/sessions/{name}/events?after={after}"
    return answer
