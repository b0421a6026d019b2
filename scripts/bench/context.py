"""Context-accounting benchmark: the per-turn cost of the pre-request check on a 200,000-token session.

A seeded session of about 2,000 messages (mostly tool turns, a few huge
outputs) is folded from its events. Each measured turn does what the
session actor does before a request (projection, phase, micro and snip
plans, hand-off decision, assembly) on a view and counter kept across
turns, then folds the turn's events in. The baseline, alternating with it
within each turn, is a plain recount: every model-visible message encoded
with tiktoken directly, no cache, as a tracker without per-message caching
pays. Target: the check at least 50x faster, and the plain recount
counting the same tokens as cairn's counter.
"""

from __future__ import annotations

import functools
import json
import random
import statistics
import sys
import time

import msgspec

from cairn.actors.session.handoff import decide_handoff
from cairn.actors.session.request import AssembledRequest, assemble, request_event
from cairn.actors.session.slimming import plan_micro, plan_snip
from cairn.actors.session.tool_budget import render_context
from cairn.actors.session.tracker import occupancy
from cairn.actors.session.view import HistoryView
from cairn.actors.tokens import (
    DEFAULT_IMAGE_TOKENS,
    MESSAGE_OVERHEAD,
    TOOL_CALL_OVERHEAD,
    Encoding,
    TokenCounter,
    load_encoding,
)
from cairn.bench._figure import Comparison, Figure
from cairn.bench._measure import LoadMeter, timed
from cairn.events.codec import GENESIS, Record
from cairn.events.kinds import AssistantMessage, EventBase, SessionStarted, ToolResult, Usage, UserMessage
from cairn.events.model import ImagePart, Message, TextPart, ToolCall
from cairn.events.state import SessionState, evolve, replay

SEED = 20_261_203
TARGET_SPEEDUP = 50.0
SID = "bench-context"
_WORDS = (
    "def", "return", "self", "import", "parser", "config", "retry", "cache", "index", "token",
    "buffer", "handler", "schema", "request", "session", "journal", "segment", "offset", "commit",
    "=", "(", ")", ":", "if", "else", "for", "in", "None", "True", "0", "1", "42", "path", "src/app.py",
)  # fmt: skip
_TOOLS = ("read", "read", "grep", "edit", "bash", "list")

SPEEDUP = Comparison(
    "context.speedup",
    "recount",
    "check",
    "plain recount / incremental check (projection, phase, micro/snip plan, hand-off, assembly), per turn",
    target=TARGET_SPEEDUP,
    better="lower",
    fmt=",.3f",
)


def _text(rng: random.Random, words: int) -> str:
    lines = (" ".join(rng.choice(_WORDS) for _ in range(12)) for _ in range(max(1, words // 12)))
    return "\n".join(lines)


def plain_recount(encoding: Encoding, messages: tuple[Message, ...]) -> int:
    """Every message's text encoded with tiktoken directly (no cache, no hashing): the baseline.

    Counts what `TokenCounter` counts (role, text, reasoning, tool calls,
    name, per-message and per-call overheads, a fixed price per image).
    """
    total = 0
    for message in messages:
        texts = [message.role, message.reasoning or "", message.name or ""]
        content = message.content
        if isinstance(content, str):
            texts.append(content)
        else:
            for part in content:
                if isinstance(part, TextPart):
                    texts.append(part.text)
                elif isinstance(part, ImagePart):
                    total += DEFAULT_IMAGE_TOKENS
        for call in message.tool_calls:
            total += TOOL_CALL_OVERHEAD
            texts += [call.name, call.arguments, call.id]
        total += MESSAGE_OVERHEAD + sum(len(encoding.encode_ordinary(text)) for text in texts if text)
    return total


def _append(records: list[Record], event: EventBase) -> Record:
    """`event` numbered as the journal would, a second after the last, to fold it live as the actor does."""
    seq = len(records) + 1
    record = Record(seq - 1, SID, seq, 1_750_000_000_000 + 1_000 * seq, GENESIS, event)  # type: ignore[arg-type]
    records.append(record)
    return record


def build_session(window: int, cap: int | None) -> tuple[list[Record], SessionState, random.Random]:
    """A seeded session of about 2,000 messages and 200,000 tokens of history: its records, state, rng."""
    rng = random.Random(SEED)
    schemas = tuple(
        json.dumps({"name": name, "parameters": {"type": "object"}}, sort_keys=True)
        for name in sorted(set(_TOOLS))
    )
    prompt = "You are a coding agent. " + _text(rng, 400)
    records: list[Record] = []
    _append(
        records,
        SessionStarted(
            workspace="/work/repo",
            model="bench-model",
            context_window=window,
            max_output_tokens=cap,
            system_prompt=prompt,
            tool_schemas=schemas,
        ),
    )
    _append(records, UserMessage(message_id="u0", content=(TextPart("Port the service to the new API."),)))
    for n in range(1, 1_000):
        name = rng.choice(_TOOLS)
        call = ToolCall(id=f"call-{n}", name=name, arguments=json.dumps({"path": f"src/mod{n % 97}.py"}))
        _append(records, AssistantMessage(message_id=f"a{n}", request_id=f"r{n}", tool_calls=(call,)))
        huge = n % 150 == 149  # a few outputs over the X1 limit
        text = "x = 1\n" * 20_000 if huge else _text(rng, 150)
        result = ToolResult(
            call_id=call.id,
            tool_name=name,
            status="error" if n % 23 == 0 else "ok",
            effect="write" if name in ("edit", "bash") else "read",
            content=(TextPart(text),),
        )
        _append(records, result)
    return records, replay(records), rng


def check(state: SessionState, view: HistoryView, now_ms: int) -> AssembledRequest:
    """What the session actor does before a request: L1's plans (decided, not applied) and assembly."""
    occ = occupancy(state, view)
    plan_micro(state, view, occ, now_ms=now_ms)
    plan_snip(state, view, occ)
    decide_handoff(state, occ.snapshot, now_ms=now_ms)
    return assemble(state, view, occ=occ)


def turn_events(
    assembled: AssembledRequest, request_id: str, call_id: str, turn_id: str, output: str
) -> list[EventBase]:
    """A turn's events after its request: the request, a reply calling `read`, its usage, the result."""
    call = ToolCall(id=call_id, name="read", arguments='{"path": "src/app.py"}')
    return [
        request_event(assembled, request_id=request_id, turn_id=turn_id),
        AssistantMessage(message_id=f"a-{request_id}", request_id=request_id, tool_calls=(call,)),
        Usage(request_id=request_id, prompt_tokens=assembled.projection.tokens, completion_tokens=40),
        ToolResult(
            call_id=call.id, tool_name="read", status="ok", effect="read", content=(TextPart(output),)
        ),
    ]


def _turns(
    records: list[Record], state: SessionState, rng: random.Random, turns: int
) -> tuple[dict[str, list[float]], SessionState, HistoryView]:
    """Measured turns: the check and the plain recount beside it (ms), then the turn's events folded in."""
    encoding = load_encoding()
    view = HistoryView(TokenCounter(encoding))
    check(state, view, records[-1].ts)  # the first request after replay builds the view once
    values: dict[str, list[float]] = {"recount": [], "check": []}
    for n in range(turns):
        recount = functools.partial(plain_recount, encoding, render_context(state.context))
        if n % 2 == 1:
            values["recount"].append(timed(recount, 1) * 1_000)
        started = time.perf_counter()
        assembled = check(state, view, records[-1].ts)
        values["check"].append((time.perf_counter() - started) * 1_000)
        if n % 2 == 0:
            values["recount"].append(timed(recount, 1) * 1_000)
        for event in turn_events(assembled, f"r{5_000 + n}", f"call-{5_000 + n}", "t1", _text(rng, 150)):
            state = evolve(state, _append(records, event))
    return values, state, view


def run(quick: bool) -> list[Figure]:
    """The `context` suite; the speedup meets its target only when the projection stayed consistent."""
    turns = 10 if quick else 60
    records, state, rng = build_session(window=1_000_000, cap=None)
    cold_view = HistoryView(TokenCounter())
    occupancy(state, cold_view)
    where = f"{len(state.context):,} messages, {cold_view.total:,} history tokens, {turns} turns"
    with LoadMeter() as load:
        values, state, view = _turns(records, state, rng, turns)
    where += (
        f": check {statistics.median(values['check']):.3f} ms, "
        f"recount {statistics.median(values['recount']):.3f} ms (median)"
    )
    consistent = occupancy(state, HistoryView(TokenCounter())) == occupancy(state, view)
    if not consistent:
        where += "; INCREMENTAL PROJECTION DIFFERS FROM A FRESH ONE"
    speedup = SPEEDUP.judge(values, load, where)
    visible = render_context(state.context)
    recounted = plain_recount(load_encoding(), visible)
    counted = TokenCounter().messages(visible)
    return [
        msgspec.structs.replace(speedup, met=bool(speedup.met) and consistent),
        Figure(
            "context.recount_matches",
            recounted,
            "tokens",
            "= cairn's count",
            recounted == counted,
            f"the plain recount of the final context against TokenCounter's {counted:,}",
        ),
    ]


if __name__ == "__main__":
    from cairn import bench

    sys.exit(bench.main(suite="context"))
