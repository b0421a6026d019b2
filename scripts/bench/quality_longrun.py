"""Long-run behaviour of compaction: 1,000-turn sessions driven through the pure L1 policies, no actors.

Each simulated turn is one model request. Before it the session's policies
decide as the turn loop does: `occupancy` (P4's local estimate), `plan_snip`
(S1-S3), and at `compaction_due` the real `Compactor` on the snip result
(scripted summary provider); below it the snip plan is applied. Every
decision is an event folded with the real `evolve`; then the turn's output is
appended by the kind's seeded mix. Not simulated: the hand-off (H1), micro
compaction (S4), provider usage (P3), reactive recovery (R3), X1's rendering.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass, field

from cairn.actors.compactor import CompactionConfig, CompactionRequest, Compactor
from cairn.actors.compactor.errors import CompactionIneffective
from cairn.actors.provider.scripted import ScriptedProvider
from cairn.actors.session.slimming import SlimPlan, apply_plan, plan_snip
from cairn.actors.session.tracker import occupancy
from cairn.actors.session.view import HistoryView
from cairn.actors.tokens import TokenCounter
from cairn.bench._figure import Figure, shown
from cairn.bench.quality_builder import WORDS, WORKSPACE, SessionBuilder
from cairn.bench.quality_corpus import KINDS
from cairn.events.kinds import EventBase
from cairn.events.model import ImagePart, Part, TextPart, ToolEffect, ToolStatus
from cairn.events.state import SessionState, evolve

SEED = 20_261_204
TURNS = 1_000
LONGRUN_WINDOW = 128_000
#: the multi-compaction kind runs in a small window, so it compacts often
SMALL_WINDOW = 32_000
#: a small window (a local model's) for the huge-output stress run
STRESS_WINDOW = 16_000


@dataclass
class LongRun:
    """What one simulated session did."""

    kind: str
    compactions: int = 0
    llm: int = 0
    failed: int = 0
    #: compactions on the turn right after another (no turn of progress between them)
    back_to_back: int = 0
    longest_compacting_run: int = 0
    #: each compaction's saving over its source tokens (the reduction gate asks for 10 %)
    saved_share: list[float] = field(default_factory=list)
    #: share of the input budget in use right after each compaction (projection / budget)
    after_share: list[float] = field(default_factory=list)
    #: compactions that left the projection still at or over the compaction threshold
    still_due: int = 0
    #: checkpoints that could not leave room for two turns of growth (the room rule, `gates.room_for`)
    room_missed: int = 0


class _Sim(SessionBuilder):
    """A session builder that folds every record into the session's state as it is added."""

    words = WORDS[:25]

    def __init__(self, kind: str, rng: random.Random, window: int) -> None:
        self.state = SessionState()
        super().__init__("longrun", rng, window=window)
        self.kind = kind
        counter = TokenCounter()
        self.view = HistoryView(counter)
        provider = ScriptedProvider(keep_requests=False)
        config = CompactionConfig(restore_files=False)
        self.compactor = Compactor(
            provider, model="bench-summary", sleep=lambda _s: None, counter=counter, config=config
        )

    def add(self, event: EventBase) -> int:
        seq = super().add(event)
        self.state = evolve(self.state, self.records[-1])
        return seq

    def step(self, name: str, words: int, *, status: ToolStatus = "ok", effect: ToolEffect = "read") -> None:
        arguments = f'{{"arg": "{self.prose(2)}"}}'
        text = self.prose(self.rng.randrange(5, 25)) if self.rng.random() < 0.5 else ""
        self.tool(name, arguments, self.prose(words), text=text, status=status, effect=effect)

    def output(self, t: int) -> None:
        """The kind's output of turn `t` (after the request was sent)."""
        rng, kind = self.rng, self.kind
        if rng.random() < 0.1:  # the turn ends: a text answer, then the user's next request
            self.say(self.prose(rng.randrange(150, 500)))
            opening = "Change of plan" if kind == "task-change" else "Next"
            self.start_turn(f"{opening}: {self.prose(rng.randrange(30, 120))}")
            return None
        if kind == "steering" and t % 12 == 11:
            self.user((TextPart(f"Also: {self.prose(20)}"),))
        if kind == "images" and t % 15 == 14:
            parts: tuple[Part, ...] = (TextPart("screenshot"), ImagePart(data="iVBORw0KGgo" * 400))
            self.user(parts)
        if kind == "huge-output" and t % 40 == 39:
            return self.step("bash", rng.randrange(6_000, 16_000))
        if kind == "debugging" and rng.random() < 0.4:
            return self.step("bash", rng.randrange(100, 500), status="error")
        if kind == "research":
            return self.step(rng.choice(("read", "grep", "web-fetch")), rng.randrange(200, 900))
        if rng.random() < 0.25:
            return self.step("edit", rng.randrange(30, 120), effect="write")
        self.step(rng.choice(("read", "bash", "grep")), rng.randrange(100, 700))

    def compact(self, t: int, plan: SlimPlan | None, result: LongRun) -> None:
        """Compact before turn `t`, on the snip `plan`'s result, and count what it did in `result`."""
        state = self.state
        source = apply_plan(state, plan, now_ms=state.last_seq * 1000).context if plan is not None else None
        request = CompactionRequest(
            state=state, workspace=WORKSPACE, trigger="threshold", now_ms=10**12 + t, source=source
        )
        try:
            outcome = self.compactor.compact(request)
        except CompactionIneffective as exc:
            for failed in exc.events:
                self.add(failed)
            result.failed += 1
            return
        for event in outcome.events:
            self.add(event)
        checkpoint = outcome.checkpoint
        result.compactions += 1
        result.llm += checkpoint.strategy == "llm"
        result.room_missed += checkpoint.diagnostics.room_missed
        saved = checkpoint.source_tokens - checkpoint.replacement_tokens
        result.saved_share.append(saved / checkpoint.source_tokens)
        after = occupancy(self.state, self.view).snapshot
        result.after_share.append((after.projected_tokens or 0) / (after.input_budget or 1))
        result.still_due += after.phase == "compaction_due"


def simulate(kind: str, turns: int, *, snip: bool = True, window: int | None = None) -> LongRun:
    """`turns` turns of `kind` through L1's policies. `snip=False`: compaction alone (no S1);
    `window`: default 128,000 (32,000 for the multi-compaction kind)."""
    if window is None:
        window = SMALL_WINDOW if kind == "multi-compaction" else LONGRUN_WINDOW
    sim = _Sim(kind, random.Random(f"{SEED}:{kind}"), window)
    sim.start_turn(f"Task: {sim.prose(40)}")
    result = LongRun(kind)
    run = 0
    for t in range(turns):
        occ = occupancy(sim.state, sim.view)
        plan = plan_snip(sim.state, sim.view, occ) if snip else None
        if occ.snapshot.phase == "compaction_due":
            result.back_to_back += run > 0
            run += 1
            result.longest_compacting_run = max(result.longest_compacting_run, run)
            sim.compact(t, plan, result)
        else:
            run = 0
            if plan is not None:
                sim.add(plan.event)
        sim.output(t)  # after a failed compaction the turn failed; the user goes on
    return result


def longrun_figures(turns: int) -> list[Figure]:
    """Every kind with and without snip at its default window, and the huge-output kind in the
    16,000-token window: no compaction on the turn after another, none that leaves the context still
    due, every one saving 10 % of its source; and the checkpoints that missed the room rule."""
    with_snip = [simulate(kind, turns) for kind in KINDS]
    without = [simulate(kind, turns, snip=False) for kind in KINDS]
    stress = simulate("huge-output", turns, window=STRESS_WINDOW)
    every = [*with_snip, *without, stress]
    sessions = (
        f"{len(every)} sessions of {turns} turns (with and without snip, and the {STRESS_WINDOW:,}-token "
        "window)"
    )
    by_kind = ", ".join(f"{r.kind} {r.compactions}" for r in without)
    back = sum(r.back_to_back for r in every)
    detail = (
        f"compactions on the turn right after another, {sessions}: of "
        f"{sum(r.compactions for r in with_snip)} with snip, {sum(r.compactions for r in without)} without "
        f"({by_kind}), {stress.compactions} in the small window; longest compacting run "
        f"{max(r.longest_compacting_run for r in every)}"
    )
    figures = [shown("quality.longrun.back_to_back_compactions", back, "compactions", "0", back == 0, detail)]
    missed = sum(r.room_missed for r in every)
    detail = (
        "checkpoints whose smallest replacement could not leave room below the compaction threshold for "
        f"two turns of the session's median growth (the room rule, beyond C10), {sessions}"
    )
    figures.append(shown("quality.longrun.room_missed", missed, "checkpoints", None, None, detail))
    due = sum(r.still_due for r in every)
    most = max(s for r in every for s in r.after_share)
    detail = (
        "compactions after which the context was still at or over the compaction threshold (the next request "
        f"compacts again), {sessions}; the most of the input budget in use right after one: {most:.3f}"
    )
    figures.append(
        shown("quality.longrun.still_due_after_compaction", due, "compactions", "0", due == 0, detail)
    )
    saving = [s for r in every for s in r.saved_share]
    least = min(saving)
    detail = (
        f"the smallest saving of {len(saving)} committed compactions (the reduction gate's minimum "
        f"progress); failed {sum(r.failed for r in every)}; median {statistics.median(saving):.3f}"
    )
    figures.append(
        shown(
            "quality.longrun.least_saving", round(least, 3), "of the source", ">= 0.10", least >= 0.10, detail
        )
    )
    return figures
