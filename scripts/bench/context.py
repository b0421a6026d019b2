"""Context-accounting benchmark: the per-turn cost of the pre-request check on a 200,000-token session.

Usage: python -m cairn.bench.context [--quick] [--json]

A seeded session of about 2,000 messages (mostly tool turns, a few huge
outputs that the tool-result budget cuts) is folded from its events. Then
each measured turn does what the session actor does before a request:
projection (P4), phase (B4), the micro and snip plans (S1-S4), the hand-off
decision (H1) and request assembly, with the history view and token counter
kept across turns; the turn's events (request, reply, usage, tool result)
are then folded in. The baseline is a plain recount: every model-visible
message's text encoded with tiktoken (cl100k) directly, no cache, no
hashing, as a tracker without per-message caching pays (the model-visible
rendering is done outside its clock, so the baseline is only the
encoding). Check and recount alternate within each turn, the order flipping
every turn; the figure is the median of the turns' ratios (`Pairs`).
Target: the check is at least 50x faster than the recount, and the plain
recount counts the same tokens as cairn's counter. A second figure measures
the same check in the hand-off band, where a snip plan is worked out every
turn.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import time
from dataclasses import dataclass

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
from cairn.bench._measure import LoadMeter, Pairs
from cairn.events.codec import GENESIS, Record
from cairn.events.kinds import AssistantMessage, EventBase, SessionStarted, ToolResult, Usage, UserMessage
from cairn.events.model import ImagePart, Message, TextPart, ToolCall, ToolStatus
from cairn.events.state import SessionState, evolve, replay

SEED = 20_261_203
TARGET_TOKENS = 200_000
TARGET_SPEEDUP = 50.0
SID = "bench-context"
_WORDS = (
    "def", "return", "self", "import", "parser", "config", "retry", "cache", "index", "token",
    "buffer", "handler", "schema", "request", "session", "journal", "segment", "offset", "commit",
    "=", "(", ")", ":", "if", "else", "for", "in", "None", "True", "0", "1", "42", "path", "src/app.py",
)  # fmt: skip
_TOOLS = ("read", "read", "grep", "edit", "bash", "list")


def _text(rng: random.Random, words: int) -> str:
    lines = []
    for _ in range(max(1, words // 12)):
        lines.append(" ".join(rng.choice(_WORDS) for _ in range(12)))
    return "\n".join(lines)


def plain_recount(encoding: Encoding, messages: tuple[Message, ...]) -> int:
    """Every message's text encoded with tiktoken directly (no cache, no hashing): the baseline.

    Counts what `TokenCounter` counts (role, text, reasoning, tool calls,
    name, per-message and per-call overheads, a fixed price per image);
    `context.recount_matches` checks the two agree.
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
                else:
                    raise ValueError(f"the bench session has no {type(part).__name__}")
        for call in message.tool_calls:
            total += TOOL_CALL_OVERHEAD
            texts += [call.name, call.arguments, call.id]
        total += MESSAGE_OVERHEAD + sum(len(encoding.encode_ordinary(text)) for text in texts if text)
    return total


class _Log:
    """Numbers events like the journal and folds them live (evolve), as the actor does."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.ts = 1_750_000_000_000

    def record(self, event: EventBase) -> Record:
        self.ts += 1_000
        seq = len(self.records) + 1
        record = Record(seq - 1, SID, seq, self.ts, GENESIS, event)  # type: ignore[arg-type]
        self.records.append(record)
        return record


def _tool_turn(log: _Log, rng: random.Random, n: int, output_words: int) -> list[Record]:
    name = rng.choice(_TOOLS)
    call = ToolCall(id=f"call-{n}", name=name, arguments=json.dumps({"path": f"src/mod{n % 97}.py"}))
    out = [log.record(AssistantMessage(message_id=f"a{n}", request_id=f"r{n}", tool_calls=(call,)))]
    huge = n % 150 == 149  # a few outputs over the X1 limit
    text = _text(rng, output_words) if not huge else "x = 1\n" * 20_000
    status: ToolStatus = "error" if n % 23 == 0 else "ok"
    result = ToolResult(
        call_id=call.id,
        tool_name=name,
        status=status,
        effect="write" if name in ("edit", "bash") else "read",
        content=(TextPart(text),),
    )
    out.append(log.record(result))
    return out


def build_session(window: int, cap: int | None) -> tuple[_Log, SessionState, random.Random]:
    """A seeded session of about 2,000 messages and 200,000 tokens of history."""
    rng = random.Random(SEED)
    log = _Log()
    log.record(
        SessionStarted(
            workspace="/work/repo",
            model="bench-model",
            context_window=window,
            max_output_tokens=cap,
            system_prompt="You are a coding agent. " + _text(rng, 400),
            tool_schemas=tuple(
                json.dumps({"name": name, "parameters": {"type": "object"}}, sort_keys=True)
                for name in sorted(set(_TOOLS))
            ),
        )
    )
    log.record(UserMessage(message_id="u0", content=(TextPart("Port the service to the new API."),)))
    for n in range(1, 1_000):
        _tool_turn(log, rng, n, 150)
    return log, replay(log.records), rng


def _check(state: SessionState, view: HistoryView, now_ms: int) -> tuple[AssembledRequest, int]:
    """The pre-request check of L1 (plans decided, not applied) and request assembly."""
    occ = occupancy(state, view)
    plan_micro(state, view, occ, now_ms=now_ms)
    snip = plan_snip(state, view, occ)
    decide_handoff(state, occ.snapshot, now_ms=now_ms)
    removed = len(snip.event.removed_call_ids) if snip is not None else 0
    return assemble(state, view, occ=occ), removed


def _fold(state: SessionState, log: _Log, event: EventBase) -> SessionState:
    return evolve(state, log.record(event))


def _run_turns(
    log: _Log, state: SessionState, rng: random.Random, turns: int, *, recount: bool
) -> tuple[list[float], list[float], int, SessionState, HistoryView]:
    """Measured turns: the check and assembly (and, with `recount`, the plain recount beside it, the
    order flipping every turn), then the turn's events folded in."""
    encoding = load_encoding()
    view = HistoryView(TokenCounter(encoding))
    _check(state, view, log.ts)  # the first request after replay builds the view once
    ours: list[float] = []
    baseline: list[float] = []
    removed = 0
    for n in range(turns):
        visible = render_context(state.context) if recount else ()
        if recount and n % 2 == 1:
            started = time.perf_counter()
            plain_recount(encoding, visible)
            baseline.append(time.perf_counter() - started)
        started = time.perf_counter()
        assembled, removed = _check(state, view, log.ts)
        ours.append(time.perf_counter() - started)
        if recount and n % 2 == 0:
            started = time.perf_counter()
            plain_recount(encoding, visible)
            baseline.append(time.perf_counter() - started)
        request_id = f"r{5_000 + n}"
        state = _fold(state, log, request_event(assembled, request_id=request_id, turn_id="t1"))
        call = ToolCall(id=f"call-{5_000 + n}", name="read", arguments='{"path": "src/app.py"}')
        state = _fold(
            state,
            log,
            AssistantMessage(message_id=f"a-{request_id}", request_id=request_id, tool_calls=(call,)),
        )
        usage = Usage(request_id=request_id, prompt_tokens=assembled.projection.tokens, completion_tokens=40)
        state = _fold(state, log, usage)
        result = ToolResult(
            call_id=call.id,
            tool_name="read",
            status="ok",
            effect="read",
            content=(TextPart(_text(rng, 150)),),
        )
        state = _fold(state, log, result)
    return ours, baseline, removed, state, view


@dataclass(frozen=True)
class Measured:
    """What the measured turns on the large session (a window far from its bands) showed."""

    messages: int  # in the context after replay
    history_tokens: int  # of that context
    check_ms: float  # the check and assembly per turn, median
    recount_ms: float  # the baseline per turn, median
    consistent: bool  # the incremental projection equals a fresh one at the end
    pairs: Pairs  # per turn: the recount's seconds and the check's
    load: LoadMeter  # the machine while the turns ran
    recounted: int  # tokens of the final context by the plain recount
    counted: int  # the same by cairn's TokenCounter


def _measure_large(turns: int) -> Measured:
    """The first check after replay, then `turns` measured turns against the recount baseline."""
    log, state, rng = build_session(window=1_000_000, cap=None)
    cold_view = HistoryView(TokenCounter(load_encoding()))
    occupancy(state, cold_view)
    history_tokens = cold_view.total
    messages = len(state.context)
    with LoadMeter() as load:
        ours, baseline, _, final_state, view = _run_turns(log, state, rng, turns, recount=True)
    check = occupancy(final_state, HistoryView(TokenCounter(load_encoding())))
    live = occupancy(final_state, view)
    visible = render_context(final_state.context)
    return Measured(
        messages=messages,
        history_tokens=history_tokens,
        check_ms=statistics.median(ours) * 1_000,
        recount_ms=statistics.median(baseline) * 1_000,
        consistent=check == live,
        pairs=Pairs([b * 1000 for b in baseline], [o * 1000 for o in ours]),
        load=load,
        recounted=plain_recount(load_encoding(), visible),
        counted=TokenCounter(load_encoding()).messages(visible),
    )


def _measure_band(history_tokens: int, turns: int) -> tuple[float, int]:
    """The same check in the hand-off band, where a snip plan is worked out every turn.

    Returns the median milliseconds per turn and the turns the last snip plan removed.
    """
    band_window = history_tokens * 100 // 75 + 10_000
    log_b, state_b, rng_b = build_session(window=band_window, cap=10_000)
    band, _, removed, _, _ = _run_turns(log_b, state_b, rng_b, turns, recount=False)
    return statistics.median(band) * 1_000, removed


#: the speedup: a plain recount's time over the incremental check's, per turn (ms)
SPEEDUP = Comparison(
    "context.speedup",
    "recount",
    "check",
    "plain recount / incremental check (projection, phase, micro/snip plan, hand-off, assembly), per turn",
    target=TARGET_SPEEDUP,
    better="lower",
    fmt=",.3f",
)


def _figures(m: Measured, band_ms: float, removed: int, turns: int) -> list[Figure]:
    """The suite's figures; the speedup meets its target only when the projection stayed consistent."""
    where = (
        f"{m.messages:,} messages, {m.history_tokens:,} history tokens, {turns} turns: check "
        f"{m.check_ms:.3f} ms, recount {m.recount_ms:.3f} ms (median)"
    )
    if not m.consistent:
        where += "; INCREMENTAL PROJECTION DIFFERS FROM A FRESH ONE"
    values = {"recount": m.pairs.baselines, "check": m.pairs.subjects}
    speedup = SPEEDUP.judge(values, m.load, where)
    return [
        msgspec.structs.replace(speedup, met=bool(speedup.met) and m.consistent),
        Figure(
            "context.recount_matches",
            m.recounted,
            "tokens",
            "= cairn's count",
            m.recounted == m.counted,
            f"the plain recount of the final context against TokenCounter's {m.counted:,}",
        ),
        Figure(
            "context.check_band_ms",
            round(band_ms, 3),
            "ms/turn",
            detail=f"the same check in the hand-off band, the snip plan removing {removed} turns each time",
            explore=True,
        ),
    ]


def run(quick: bool) -> list[Figure]:
    """The `context` suite: the large session's turns, then the same check in the hand-off band."""
    turns = 10 if quick else 60
    measured = _measure_large(turns)
    band_ms, removed = _measure_band(measured.history_tokens, turns)
    return _figures(measured, band_ms, removed, turns)


def main(argv: list[str] | None = None) -> int:
    """Run this suite alone, with the report and flags of `cairn bench`."""
    from cairn import bench

    return bench.main(argv, suite="context")


if __name__ == "__main__":
    sys.exit(main())
