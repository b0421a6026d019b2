"""The quality bench's strategies and probes: what the effective context still carries after compaction.

Each corpus session is folded with the real `evolve`; at each compaction
point one strategy (`STRATEGIES`) replaces the effective context: `ceiling`
none; `blank` the compactor with a summary of seven "- No evidence observed."
headings (the host still adds C9's tail, C8's records and C11's task: what it
carries, no summary did); `truncation` a marker and the newest whole units,
no task, to the tokens of the summarizer's replacement at that point;
`fallback` the compactor whose summary call fails (F1-F5); `fallback_at_budget`
F1-F5 built for the summarizer's tokens (the host's parts at the same budget);
`summarizer` the compactor with the provider under test.

Probes: the facts planted at or before the last compaction point and not in
C9's retained tail. A fact is carried when all its anchors occur within one
line of the model-visible context (`render_context`; tool calls as `name
arguments` lines), exactly, or case-insensitively for statements. A
superseded fact is *presented as current* when a line carries its old value
without marking it replaced (`SUPERSESSION_MARKERS`) and its replacement is
absent or only earlier. A probed fact is *summary-only* when neither the
active task (C11) nor an exact record (C8) carries it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import msgspec

from cairn.actors.budget_rule import input_budget_of
from cairn.actors.compactor import CompactionConfig, CompactionRequest, Compactor
from cairn.actors.compactor.active_task import active_task_message, task_text
from cairn.actors.compactor.checkpoint import strip_handoff
from cairn.actors.compactor.errors import CompactionIneffective
from cairn.actors.compactor.fallback import plan_fallback
from cairn.actors.compactor.gates import effect_target
from cairn.actors.compactor.ledger import source_records
from cairn.actors.compactor.replacement import fallback_summary_message, message_ids, retained_tail
from cairn.actors.provider.base import Provider
from cairn.actors.provider.scripted import Reply, ScriptedProvider, http_error
from cairn.actors.session.tool_budget import render_context
from cairn.actors.tokens import TokenCounter
from cairn.bench.quality_builder import FACT_KINDS, WORKSPACE, Fact, Session
from cairn.bench.quality_corpus import STATEMENT_KINDS
from cairn.events.codec import GENESIS, Record
from cairn.events.kinds import CHECKPOINT_VERSION, CheckpointCommitted, EventBase
from cairn.events.model import Message, text_of
from cairn.events.protocol import HEADINGS
from cairn.events.state import SessionState, carried_for_checkpoint, evolve

STRATEGIES = ("ceiling", "blank", "truncation", "fallback", "fallback_at_budget", "summarizer")
AT_BUDGET = ("truncation", "fallback_at_budget")
BLANK_SUMMARY = (
    "<summary>\n" + "\n\n".join(f"## {h}\n- No evidence observed." for h in HEADINGS) + "\n</summary>"
)
TRUNCATION_MARKER = "[Earlier messages were truncated to fit the context window.]"
SUPERSESSION_MARKERS = ("superseded", "no longer", "replaced by", "instead of", "was changed", "outdated")

ProviderFactory = Callable[[], Provider]


@dataclass
class Run:
    """One strategy over one session: the effective context after its last compaction, its compactions
    (`refused`: nothing smaller found; `fallbacks`: the summary failed, and why, in order) and each
    one's replacement tokens; for the summarizer, C9's tail, the task and the records at the last one."""

    context: tuple[Message, ...] = ()
    tokens: int = 0
    compactions: int = 0
    refused: int = 0
    fallbacks: int = 0
    failures: list[str] = field(default_factory=list)
    replacement_tokens: list[int] = field(default_factory=list)
    tail: tuple[Message, ...] = ()
    task: str = ""
    records: tuple[str, ...] = ()


def _apply(state: SessionState, events: Sequence[EventBase]) -> SessionState:
    for event in events:
        seq = state.last_seq + 1
        record = Record(seq - 1, state.sid, seq, 1000 * seq, GENESIS, event)  # type: ignore[arg-type]
        state = evolve(state, record)
    return state


def _at_budget(state: SessionState, strategy: str, budget: int, counter: TokenCounter) -> CheckpointCommitted:
    """Truncation (a marker, then the newest units that fit `budget`, one cut to fit) or the fallback
    built for `budget` instead of C10's target (F1-F5: the records' notice, newest units, the task)."""
    source = strip_handoff(state.context)
    task, task_message = "", None
    if strategy == "truncation":
        summary = Message(role="user", content=TRUNCATION_MARKER, id=f"trunc-{state.epoch + 1}")
    else:
        summary_id, _, task_id = message_ids(state.epoch + 1)
        task = task_text(state.carried.open_turn)
        summary = fallback_summary_message(source_records(source).records, summary_id)
        task_message = active_task_message(task, task_id)
    plan = plan_fallback(
        source, summary=summary, task_message=task_message, task=task, target=budget, counter=counter
    )
    return CheckpointCommitted(
        version=CHECKPOINT_VERSION,
        epoch=state.epoch + 1,
        through_seq=state.last_seq,
        trigger="threshold",
        strategy="fallback",
        source_tokens=counter.messages(source),
        replacement_tokens=plan.tokens,
        replacement_messages=plan.replacement,
        carried=carried_for_checkpoint(state, reset_breaker=False),
    )


def _budget_of(state: SessionState, counter: TokenCounter) -> int:
    """The token budget a compaction of `state` aims at (C10), from its window and output cap."""
    info = state.info
    window = info.context_window if info is not None else None
    cap = info.max_output_tokens if info is not None else None
    return effect_target(counter.messages(state.context), window, input_budget_of(window, cap))


def _compactor(strategy: str, summarizer: ProviderFactory, counter: TokenCounter) -> Compactor:
    """The compactor of a strategy: its summarizer answers blank, fails (the fallback), or is the one
    under test. The bench workspace has no files; the blank summary has no line of its own, so
    `grounding` would refuse it: it is committed on purpose."""
    provider: Provider
    if strategy == "blank":
        provider = ScriptedProvider(default=Reply(text=BLANK_SUMMARY))
    elif strategy == "fallback":
        provider = ScriptedProvider(default=http_error(400))
    else:
        provider = summarizer()
    config = CompactionConfig(restore_files=False, require_grounding=strategy != "blank")
    return Compactor(provider, model="bench-summary", sleep=lambda _s: None, counter=counter, config=config)


def run_strategy(
    session: Session,
    strategy: str,
    counter: TokenCounter,
    *,
    summarizer: ProviderFactory = ScriptedProvider,
    budgets: Sequence[int] = (),
) -> Run:
    """Fold `session`, compacting with `strategy` at each of its points; `budgets`: the tokens of
    the strategies `AT_BUDGET` at each point (the summarizer's replacement tokens)."""
    run = Run()
    state = SessionState()
    last = max(session.compact_after)
    for record in session.records:
        state = _apply(state, [record.event])
        if record.seq not in session.compact_after or strategy == "ceiling":
            continue
        index = run.compactions
        run.compactions += 1
        if strategy == "summarizer" and record.seq == last:
            source = strip_handoff(state.context)
            run.tail = retained_tail(source)
            run.task = task_text(state.carried.open_turn)
            run.records = tuple(r.payload for r in source_records(source).records)
        if strategy in AT_BUDGET:
            budget = budgets[index] if index < len(budgets) else _budget_of(state, counter)
            checkpoint = _at_budget(state, strategy, budget, counter)
            state = _apply(state, [checkpoint])
            run.replacement_tokens.append(checkpoint.replacement_tokens)
            continue
        request = CompactionRequest(state=state, workspace=WORKSPACE, trigger="threshold", now_ms=10**12)
        try:
            outcome = _compactor(strategy, summarizer, counter).compact(request)
        except CompactionIneffective as exc:
            state = _apply(state, exc.events)
            run.refused += 1
            run.failures.extend(f"{e.reason}: {e.detail}" for e in exc.events[:1])
            continue
        state = _apply(state, outcome.events)
        run.fallbacks += outcome.strategy == "fallback"
        if outcome.failure is not None:
            run.failures.append(f"{outcome.failure.reason}: {outcome.failure.detail}")
        run.replacement_tokens.append(outcome.checkpoint.replacement_tokens)
    run.context = state.context
    run.tokens = counter.messages(state.context)
    return run


# -- probes -------------------------------------------------------------------------------------


class Lines:
    """The model-visible lines of a context, in order, with a lowered copy for statements."""

    def __init__(self, messages: Sequence[Message]) -> None:
        lines: list[str] = []
        for message in render_context(messages):
            lines.extend(text_of(message).splitlines())
            lines.extend(f"{call.name} {call.arguments}" for call in message.tool_calls)
        self.lines = lines
        self.lowered = [line.lower() for line in lines]


def last_line(fact: Fact, lines: Lines, *, unmarked: bool = False) -> int | None:
    """The index of the last line carrying `fact`, or None; `unmarked` skips lines that mark a value
    as replaced."""
    statement = fact.kind in STATEMENT_KINDS or (fact.kind == "superseded" and len(fact.anchors) > 1)
    anchors = tuple(a.lower() for a in fact.anchors) if statement else fact.anchors
    pool = lines.lowered if statement else lines.lines
    for index in range(len(pool) - 1, -1, -1):
        if all(anchor in pool[index] for anchor in anchors):
            if unmarked and any(marker in lines.lowered[index] for marker in SUPERSESSION_MARKERS):
                continue
            return index
    return None


def presented_as_current(fact: Fact, replacing: Fact | None, lines: Lines) -> bool:
    """A superseded fact's old value shown as if it still held."""
    old = last_line(fact, lines, unmarked=True)
    if old is None:
        return False
    new = last_line(replacing, lines) if replacing is not None else None
    return new is None or old > new


class Probe(msgspec.Struct, frozen=True):
    """One probed fact; `summary_only` when neither the task (C11) nor a record (C8) carries it."""

    fact: Fact
    summary_only: bool


def probes_of(session: Session, reference: Run) -> list[Probe]:
    """The probed facts of `session`, given the summarizer's run (its tail, task and records)."""
    last = max(session.compact_after)
    tail = Lines(reference.tail)
    task = Lines([Message(role="user", content=reference.task)])
    records = Lines([Message(role="user", content="\n".join(reference.records))])
    out = []
    for fact in session.facts:
        if fact.seq > last or last_line(fact, tail) is not None:
            continue
        out.append(Probe(fact, last_line(fact, task) is None and last_line(fact, records) is None))
    return out


@dataclass
class Score:
    """What one strategy carried of the probed facts, over the corpus."""

    carried: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FACT_KINDS, 0))
    probed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FACT_KINDS, 0))
    summary_only: int = 0
    summary_only_carried: int = 0
    superseded: int = 0
    stale: int = 0
    tokens: int = 0
    ceiling_tokens: int = 0
    compactions: int = 0
    refused: int = 0
    fallbacks: int = 0
    #: why summaries failed: each failure's reason with its detail's first clause, and how often
    failures: Counter[str] = field(default_factory=Counter)

    def kind(self, kind: str) -> float | None:
        return 100.0 * self.carried[kind] / self.probed[kind] if self.probed[kind] else None

    def summary_only_pct(self) -> float:
        return 100.0 * self.summary_only_carried / self.summary_only if self.summary_only else 100.0

    def stale_pct(self) -> float:
        return 100.0 * self.stale / self.superseded if self.superseded else 0.0

    @property
    def taken(self) -> int:
        """The summaries taken as the checkpoint: compactions that neither fell back nor were refused."""
        return self.compactions - self.fallbacks - self.refused

    def add(self, session: Session, probes: Sequence[Probe], run: Run) -> None:
        lines = Lines(run.context)
        by_key = {fact.key: fact for fact in session.facts}
        for probe in probes:
            fact = probe.fact
            ok = last_line(fact, lines) is not None
            self.probed[fact.kind] += 1
            self.carried[fact.kind] += ok
            if probe.summary_only:
                self.summary_only += 1
                self.summary_only_carried += ok
            if fact.kind == "superseded":
                self.superseded += 1
                self.stale += presented_as_current(fact, by_key.get(fact.replaced_by), lines)
        self.tokens += run.tokens
        self.compactions += run.compactions
        self.refused += run.refused
        self.fallbacks += run.fallbacks
        self.failures.update(failure.split(";")[0][:160] for failure in run.failures)


#: sees each session's probes and runs by strategy (the judge's hook)
SessionHook = Callable[[Session, list[Probe], dict[str, Run]], None]


def evaluate(
    sessions: Sequence[Session],
    counter: TokenCounter,
    *,
    summarizer: ProviderFactory = ScriptedProvider,
    on_session: SessionHook | None = None,
) -> tuple[dict[str, Score], list[Probe]]:
    """Every strategy over every session: the scores by strategy, and the probes."""
    scores = {name: Score() for name in STRATEGIES}
    probes_all: list[Probe] = []
    for session in sessions:
        reference = run_strategy(session, "summarizer", counter, summarizer=summarizer)
        probes = probes_of(session, reference)
        probes_all.extend(probes)
        runs = {"summarizer": reference}
        for name in STRATEGIES[:-1]:
            runs[name] = run_strategy(session, name, counter, budgets=reference.replacement_tokens)
        for name, run in runs.items():
            scores[name].add(session, probes, run)
            scores[name].ceiling_tokens += runs["ceiling"].tokens
        if on_session is not None:
            on_session(session, probes, runs)
    return scores, probes_all
