"""Long-run behaviour of compaction: 1,000-turn sessions driven through the pure policies, no actors.

Each simulated turn is one model request. Before it, the session's own
policies decide as the turn loop does (L1): `occupancy` (P4's local
estimate, B1-B4), `plan_snip` (S1-S3), and at `compaction_due` the real
`Compactor` on the snip result (the scripted summary provider: offline, the
pipeline's floor); below it, the snip plan is applied. Every decision is an
event folded with the real `evolve`. Then the turn's output is appended:
an assistant message with a tool call and its result, by the kind's mix
(seeded), plus the kind's user messages (new tasks, steering, screenshots).
Not simulated: the hand-off (H1, hidden and small), micro compaction (S4,
no idle gaps), provider usage (P3; the projection is the local estimate),
reactive recovery (R3) and X1's rendering of huge outputs.

Figures per kind: compactions per 100 turns (and snips), tokens saved per
compaction, back-to-back compactions (a compaction on the turn right after
another: no turn of progress between them), the longest run of consecutive
turns that compacted, compactions that committed nothing (L2: the turn
fails), and the share of the input budget in use right after each
compaction.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass, field

from cairn.actors.compactor import CompactionConfig, CompactionRequest, Compactor
from cairn.actors.compactor.errors import CompactionIneffective
from cairn.actors.provider.scripted import ScriptedProvider
from cairn.actors.session.slimming import apply_plan, plan_snip
from cairn.actors.session.tracker import occupancy
from cairn.actors.session.view import HistoryView
from cairn.actors.tokens import TokenCounter
from cairn.bench._figure import Figure, shown
from cairn.bench.quality_builder import WORDS, WORKSPACE
from cairn.bench.quality_corpus import KINDS
from cairn.events.codec import GENESIS, Record
from cairn.events.kinds import (
    AssistantMessage,
    CheckpointCommitted,
    EventBase,
    SessionStarted,
    ToolResult,
    TurnCompleted,
    TurnStarted,
    UserMessage,
)
from cairn.events.model import ImagePart, Part, TextPart, ToolCall
from cairn.events.state import SessionState, evolve

SEED = 20_261_204
TURNS = 1_000
LONGRUN_WINDOW = 128_000
#: the multi-compaction kind runs in a small window, so it compacts often
SMALL_WINDOW = 32_000
#: a small window (a local model's) for the huge-output stress run
STRESS_WINDOW = 16_000
#: filler words: the corpus's first 25 (the same list, so the seeded text is unchanged)
_WORDS = WORDS[:25]


@dataclass
class LongRun:
    """What one simulated session did."""

    kind: str
    turns: int = 0
    compactions: int = 0
    snips: int = 0
    failed: int = 0
    back_to_back: int = 0
    longest_compacting_run: int = 0
    saved: list[int] = field(default_factory=list)
    #: share of the input budget in use right after each compaction (projection / budget)
    after_share: list[float] = field(default_factory=list)
    #: the same projection over the whole context window
    after_window_share: list[float] = field(default_factory=list)
    #: each compaction's saving over its source tokens (the reduction gate asks for 10 %)
    saved_share: list[float] = field(default_factory=list)
    #: compactions that left the projection still at or over the compaction threshold
    still_due: int = 0
    llm: int = 0
    #: checkpoints that could not leave room for two turns of growth (the room rule, `gates.room_for`)
    room_missed: int = 0

    def per_100(self, count: int) -> float:
        return 100.0 * count / self.turns if self.turns else 0.0


class _Sim:
    def __init__(self, kind: str, rng: random.Random, counter: TokenCounter, window: int | None) -> None:
        self.kind = kind
        self.rng = rng
        self.counter = counter
        self.view = HistoryView(counter)
        self.state = SessionState()
        self.n = 0
        self.turn: str | None = None
        self.compactor = Compactor(
            ScriptedProvider(keep_requests=False),
            model="bench-summary",
            sleep=lambda _s: None,
            counter=counter,
            config=CompactionConfig(restore_files=False),
        )
        if window is None:
            window = SMALL_WINDOW if kind == "multi-compaction" else LONGRUN_WINDOW
        self.add([SessionStarted(workspace=WORKSPACE, model="bench", context_window=window)])

    def add(self, events: list[EventBase]) -> None:
        for event in events:
            seq = self.state.last_seq + 1
            record = Record(seq - 1, "longrun", seq, 1000 * seq, GENESIS, event)  # type: ignore[arg-type]
            self.state = evolve(self.state, record)

    def ident(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def prose(self, words: int) -> str:
        return " ".join(self.rng.choice(_WORDS) for _ in range(words))

    def start_turn(self, text: str) -> None:
        events: list[EventBase] = []
        if self.turn is not None:
            events.append(TurnCompleted(turn_id=self.turn, requests=1))
        mid = self.ident("u")
        self.turn = self.ident("t")
        events += [
            UserMessage(message_id=mid, content=(TextPart(text),)),
            TurnStarted(turn_id=self.turn, message_id=mid),
        ]
        self.add(events)

    def tool_step(self, name: str, words: int, *, status: str = "ok", effect: str = "read") -> None:
        call = ToolCall(self.ident("c"), name, f'{{"arg": "{self.prose(2)}"}}')
        text = self.prose(self.rng.randrange(5, 25)) if self.rng.random() < 0.5 else ""
        self.add(
            [
                AssistantMessage(
                    message_id=self.ident("a"), request_id=self.ident("r"), text=text, tool_calls=(call,)
                ),
                ToolResult(
                    call_id=call.id,
                    tool_name=name,
                    status=status,  # type: ignore[arg-type]
                    effect=effect,  # type: ignore[arg-type]
                    content=(TextPart(self.prose(words)),),
                ),
            ]
        )

    def output(self, t: int) -> None:
        """The kind's output of turn `t` (after the request was sent)."""
        rng, kind = self.rng, self.kind
        if rng.random() < 0.1:  # the turn ends: a text answer, then the user's next request
            self.add(
                [
                    AssistantMessage(
                        message_id=self.ident("a"),
                        request_id=self.ident("r"),
                        text=self.prose(rng.randrange(150, 500)),
                    )
                ]
            )
            self.start_turn(
                f"{'Change of plan' if kind == 'task-change' else 'Next'}: "
                f"{self.prose(rng.randrange(30, 120))}"
            )
            return None
        if kind == "steering" and t % 12 == 11:
            self.add(
                [UserMessage(message_id=self.ident("u"), content=(TextPart(f"Also: {self.prose(20)}"),))]
            )
        if kind == "images" and t % 15 == 14:
            parts: tuple[Part, ...] = (TextPart("screenshot"), ImagePart(data="iVBORw0KGgo" * 400))
            self.add([UserMessage(message_id=self.ident("u"), content=parts)])
        if kind == "huge-output" and t % 40 == 39:
            return self.tool_step("bash", rng.randrange(6_000, 16_000))
        if kind == "debugging" and rng.random() < 0.4:
            return self.tool_step("bash", rng.randrange(100, 500), status="error")
        if kind == "research":
            return self.tool_step(rng.choice(("read", "grep", "web-fetch")), rng.randrange(200, 900))
        if rng.random() < 0.25:
            return self.tool_step("edit", rng.randrange(30, 120), effect="write")
        self.tool_step(rng.choice(("read", "bash", "grep")), rng.randrange(100, 700))


def simulate(
    kind: str,
    turns: int,
    seed: int = SEED,
    counter: TokenCounter | None = None,
    *,
    snip: bool = True,
    window: int | None = None,
) -> LongRun:
    """`turns` turns of `kind` through L1's policies (see the module doc).

    `snip=False`: compaction alone (no S1), as a host without snipping compacts; `window`:
    the context window (default 128,000; 32,000 for the multi-compaction kind).
    """
    rng = random.Random(f"{seed}:{kind}")
    sim = _Sim(kind, rng, counter or TokenCounter(), window)
    sim.start_turn(f"Task: {sim.prose(40)}")
    result = LongRun(kind, turns)
    last_compacted = -2
    run = 0
    for t in range(turns):
        state = sim.state
        occ = occupancy(state, sim.view)
        plan = plan_snip(state, sim.view, occ) if snip else None
        if occ.snapshot.phase == "compaction_due":
            source = (
                apply_plan(state, plan, now_ms=state.last_seq * 1000).context if plan is not None else None
            )
            request = CompactionRequest(
                state=state, workspace=WORKSPACE, trigger="threshold", now_ms=10**12 + t, source=source
            )
            result.back_to_back += last_compacted == t - 1
            last_compacted = t
            run += 1
            result.longest_compacting_run = max(result.longest_compacting_run, run)
            try:
                outcome = sim.compactor.compact(request)
            except CompactionIneffective as exc:
                sim.add(list(exc.events))
                result.failed += 1
                sim.output(t)  # the turn failed; the user goes on
                continue
            sim.add(list(outcome.events))
            _count_compaction(result, outcome.checkpoint, sim)
        else:
            run = 0
            if plan is not None:
                sim.add([plan.event])
                result.snips += 1
        sim.output(t)
    return result


def _count_compaction(result: LongRun, checkpoint: CheckpointCommitted, sim: _Sim) -> None:
    """A committed compaction in `result`: by summary or not, its room, its saving, the share of the
    window and of the input budget in use right after, and whether it is still due."""
    result.compactions += 1
    result.llm += checkpoint.strategy == "llm"
    result.room_missed += checkpoint.diagnostics.room_missed
    saved = checkpoint.source_tokens - checkpoint.replacement_tokens
    result.saved.append(saved)
    result.saved_share.append(saved / checkpoint.source_tokens)
    after = occupancy(sim.state, sim.view).snapshot
    projected = after.projected_tokens or 0
    result.after_share.append(projected / (after.input_budget or 1))
    result.after_window_share.append(projected / (after.budget.context_window or 1))
    result.still_due += after.phase == "compaction_due"


def simulate_all(turns: int = TURNS, seed: int = SEED, *, snip: bool = True) -> list[LongRun]:
    counter = TokenCounter()
    return [simulate(kind, turns, seed, counter, snip=snip) for kind in KINDS]


# -- the figures ---------------------------------------------------------------------------------


def _per_session_figures(runs: list[LongRun], variant: str, turns: int) -> list[Figure]:
    figures = []
    for r in runs:
        saved = f"{statistics.median(r.saved):,.0f}" if r.saved else "-"
        share = (
            f"window {statistics.median(r.after_window_share):.2f} (max {max(r.after_window_share):.2f}), "
            f"input budget {statistics.median(r.after_share):.2f} (max {max(r.after_share):.2f})"
            if r.after_share
            else "-"
        )
        detail = (
            f"{r.compactions} compactions in {turns} turns ({r.llm} by summary); "
            f"snips {r.per_100(r.snips):.1f}/100; median saved {saved} tokens; "
            f"share in use after (median): {share}; still due after {r.still_due}; "
            f"back-to-back {r.back_to_back}; longest compacting run {r.longest_compacting_run}; "
            f"failed {r.failed}"
        )
        figures.append(
            shown(
                f"quality.{variant}.{r.kind}",
                round(r.per_100(r.compactions), 2),
                "compactions/100 turns",
                None,
                None,
                detail,
            )
        )
    return figures


def longrun_figures(turns: int) -> list[Figure]:
    """The long runs' figures: each kind's compactions per 100 turns (with and without snip, and the
    huge-output kind in a small window), then the bounds every run must keep and the shares left."""
    figures: list[Figure] = []
    with_snip = simulate_all(turns)
    without = simulate_all(turns, snip=False)
    figures += _per_session_figures(with_snip, "longrun", turns)
    figures += _per_session_figures(without, "longrun_nosnip", turns)
    runs = with_snip + without
    stress = simulate("huge-output", turns, window=STRESS_WINDOW)
    figures += _per_session_figures([stress], "longrun_small_window", turns)
    figures += _bound_figures([*runs, stress], stress, turns)
    figures += _share_figures(runs, [*runs, stress], stress)
    return figures


def _bound_figures(every: list[LongRun], stress: LongRun, turns: int) -> list[Figure]:
    """No compaction on the turn right after another, rooms missed, and none still due after one."""
    figures: list[Figure] = []
    back = sum(r.back_to_back for r in every)
    figures.append(
        shown(
            "quality.longrun.back_to_back_compactions",
            back,
            "compactions",
            "0",
            back == 0,
            f"compactions on the turn right after another, {len(every)} sessions of {turns} turns "
            f"(with and without snip, and the {STRESS_WINDOW:,}-token window); longest compacting run "
            f"{max(r.longest_compacting_run for r in every)}",
        )
    )
    missed = sum(r.room_missed for r in every)
    figures.append(
        shown(
            "quality.longrun.room_missed",
            missed,
            "checkpoints",
            None,
            None,
            f"checkpoints whose smallest replacement could not leave room below the compaction threshold "
            f"for two turns of the session's median growth (the room rule, beyond C10; the checkpoint "
            f"says so in room_missed), {len(every)} sessions",
        )
    )
    due = sum(r.still_due for r in every)
    figures.append(
        shown(
            "quality.longrun.still_due_after_compaction",
            due,
            "compactions",
            "0",
            due == 0,
            f"compactions after which the context was still at or over the compaction threshold (no room "
            f"for a turn of progress: the next request compacts again), {len(every)} sessions "
            f"(the {STRESS_WINDOW:,}-token window had {stress.still_due})",
        )
    )
    return figures


def _share_figures(runs: list[LongRun], every: list[LongRun], stress: LongRun) -> list[Figure]:
    """The share of the window in use right after each compaction, and the least saving of any."""
    figures: list[Figure] = []
    window = [s for r in runs for s in r.after_window_share]
    budget = [s for r in runs for s in r.after_share]
    figures.append(
        shown(
            "quality.longrun.window_share_after_compaction",
            round(max(window), 3) if window else 0,
            "ratio (max)",
            None,
            None,
            f"projection right after each of {len(window)} compactions (default windows) over the window; "
            f"median {statistics.median(window):.3f}; over the input budget: median "
            f"{statistics.median(budget):.3f}, max {max(budget):.3f}; the {STRESS_WINDOW:,}-token window: "
            f"{_max(stress.after_window_share):.3f} of its window, {_max(stress.after_share):.3f} of its "
            "input budget"
            if window
            else "no compaction",
        )
    )
    saving = [s for r in every for s in r.saved_share]
    least = min(saving) if saving else 1.0
    figures.append(
        shown(
            "quality.longrun.least_saving",
            round(least, 3),
            "of the source",
            ">= 0.10",
            least >= 0.10,
            f"the smallest saving of {len(saving)} committed compactions (the reduction gate's minimum "
            f"progress); failed {sum(r.failed for r in every)}; median "
            f"{statistics.median(saving) if saving else 0:.3f}",
        )
    )
    return figures


def _max(values: list[float]) -> float:
    return max(values) if values else 0.0
