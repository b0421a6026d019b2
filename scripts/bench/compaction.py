"""Compaction quality harness: a seeded corpus of sessions through the LLM and fallback paths.

The seeded corpus mixes tool-heavy coding sessions carrying exact
continuation records, long user requests, images, huge single tool outputs
and tiny histories; each session is compacted through the LLM path (the
scripted summary provider) and through the fallback (a provider refusing
with HTTP 400). Targets: records kept verbatim under their own heading and
the active task kept (100 %), no replacement over its target, no checkpoint
growing, and every checkpoint re-derived by the audit.
"""

from __future__ import annotations

import collections
import contextlib
import random
import statistics
import sys
from dataclasses import dataclass, field

import msgspec

from cairn.actors.compactor import CompactionRequest, Compactor, verify_checkpoint
from cairn.actors.compactor.active_task import TASK_HEAD_CHARS, TASK_TAIL_CHARS, TASK_VERBATIM_CHARS
from cairn.actors.compactor.errors import CompactionIneffective
from cairn.actors.compactor.ledger import NEXT_ACTION
from cairn.actors.provider.scripted import ScriptedProvider, http_error
from cairn.actors.tokens import TokenCounter
from cairn.bench._figure import Figure
from cairn.bench.quality_builder import WORDS
from cairn.events.codec import GENESIS, Record
from cairn.events.kinds import (
    AssistantMessage,
    CheckpointCommitted,
    EventBase,
    FileAccess,
    SessionStarted,
    ToolResult,
    TurnStarted,
    UserMessage,
)
from cairn.events.model import ImagePart, Part, TextPart, ToolCall
from cairn.events.protocol import HEADINGS
from cairn.events.state import SessionState, replay

SEED = 20_261_202
KINDS = ("coding", "long-request", "images", "huge-output", "tiny")
WINDOWS = (32_000, 128_000, 200_000, 1_000_000)
#: the filler words: the quality corpus's first 22, and "assert"
_WORDS = (*WORDS[:22], "assert")


class Sample(msgspec.Struct, frozen=True):
    name: str
    state: SessionState
    records: tuple[tuple[str, str], ...]
    task: str


class _Log:
    def __init__(self, sid: str, window: int) -> None:
        self.sid = sid
        self.records: list[Record] = []
        self.n = 0
        self.add(SessionStarted(workspace="/bench/ws", model="bench", context_window=window))

    def add(self, event: EventBase) -> None:
        seq = len(self.records) + 1
        self.records.append(Record(seq - 1, self.sid, seq, 1000 * seq, GENESIS, event))  # type: ignore[arg-type]

    def ident(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"


def _prose(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def _record(rng: random.Random) -> str:
    flag = rng.choice(["-x", "--maxfail=1", "-k slow", "--no-cov"])
    return f"pytest tests/test_{rng.choice(_WORDS)}.py {flag} # id {rng.randrange(10**6)}"


def build_sample(index: int, rng: random.Random) -> Sample:
    kind = KINDS[index % len(KINDS)]
    window = WINDOWS[rng.randrange(len(WINDOWS))]
    log = _Log(f"bench-{index}", window)
    #: the records the ledger must keep verbatim: every one planted, but of the next actions
    #: only the newest (the spent rule, `actors.compactor.ledger`; none of these ever runs)
    records: list[tuple[str, str]] = []
    planted = 0
    task_lines = [f"Task {index}: {_prose(rng, 20)}."]
    if kind == "long-request":
        task_lines.append(_prose(rng, rng.randrange(1_500, 4_000)))
    task = "\n".join(task_lines)
    mid = log.ident("u")
    log.add(UserMessage(message_id=mid, content=(TextPart(task),)))
    log.add(TurnStarted(turn_id=log.ident("t"), message_id=mid))
    rounds = {"tiny": 1, "huge-output": 4}.get(kind, rng.randrange(15, 60))
    for r in range(rounds):
        output = _prose(rng, rng.randrange(50, 600))
        if kind == "huge-output" and r == rounds - 1:
            output = _prose(rng, 60_000)
        if kind != "tiny" and rng.random() < 0.25 and planted < 8:
            planted += 1
            heading = rng.choice(HEADINGS)
            payload = _record(rng)
            if heading == NEXT_ACTION:  # the spent rule: a newer pending next action replaces it
                records = [r for r in records if r[0] != NEXT_ACTION]
            records.append((heading, payload))
            output += f"\nEXACT CONTINUATION RECORD [{heading.lower()}] :: {payload}\n"
        call = ToolCall(log.ident("c"), rng.choice(["read", "bash", "edit"]), '{"path": "src/app.py"}')
        log.add(
            AssistantMessage(
                message_id=log.ident("a"), request_id=log.ident("r"), text=_prose(rng, 12), tool_calls=(call,)
            )
        )
        log.add(
            ToolResult(
                call_id=call.id,
                tool_name=call.name,
                status="ok",
                effect="read",
                content=(TextPart(output),),
                files=(FileAccess("src/app.py"),),
            )
        )
        if kind == "images" and r % 5 == 0:
            parts: tuple[Part, ...] = (TextPart("screenshot of the failure"), ImagePart(data="QUJD" * 500))
            log.add(UserMessage(message_id=log.ident("u"), content=parts))
        log.add(AssistantMessage(message_id=log.ident("a"), request_id=log.ident("r"), text=_prose(rng, 25)))
    return Sample(f"{kind}-{index}", replay(log.records), tuple(records), task)


def corpus(count: int) -> list[Sample]:
    rng = random.Random(SEED)
    return [build_sample(i, rng) for i in range(count)]


def _records_kept(checkpoint: CheckpointCommitted, records: tuple[tuple[str, str], ...]) -> int:
    summary = checkpoint.replacement_messages[0].content
    assert isinstance(summary, str)
    kept = 0
    for heading, payload in records:
        section = summary.split(f"## {heading}\n", 1)[-1].split("\n\n## ", 1)[0]
        if f"- {payload}" in section.splitlines():
            kept += 1
    return kept


def _task_kept(checkpoint: CheckpointCommitted, task: str) -> bool:
    last = checkpoint.replacement_messages[-1]
    if last.meta.origin != "active-task" or not isinstance(last.content, str):
        return False
    if len(task) <= TASK_VERBATIM_CHARS:
        return task in last.content
    return task[:TASK_HEAD_CHARS] in last.content and task[-TASK_TAIL_CHARS:] in last.content


@dataclass
class PathStats:
    """What one path (the LLM summary or the fallback) made of the corpus, per checkpoint committed."""

    kept: int = 0  # exact records kept under their own heading
    total: int = 0  # exact records in the sessions compacted
    tasks_ok: int = 0
    llm_used: int = 0
    audits_ok: int = 0
    refused: list[str] = field(default_factory=list)  # sessions nothing could shrink: no checkpoint
    ratios: dict[str, float] = field(default_factory=dict)  # replacement over target, by session
    reductions: list[float] = field(default_factory=list)
    reasons: collections.Counter[str] = field(default_factory=collections.Counter)  # why the LLM fell back


def _compact_corpus(samples: list[Sample], path: str, counter: TokenCounter) -> PathStats:
    """Compact every sample through `path` (`llm` or `fallback`) and measure each checkpoint."""
    s = PathStats()
    for sample in samples:
        provider = ScriptedProvider() if path == "llm" else ScriptedProvider(default=http_error(400))
        service = Compactor(provider, model="bench-summary", sleep=lambda _s: None, counter=counter)
        request = CompactionRequest(
            state=sample.state, workspace="/bench/ws", trigger="threshold", now_ms=10**12
        )
        try:
            outcome = service.compact(request)
        except CompactionIneffective:
            s.refused.append(sample.name)
            continue
        checkpoint = outcome.checkpoint
        s.llm_used += checkpoint.strategy == "llm"
        if path == "llm" and outcome.failure is not None:
            s.reasons[outcome.failure.reason] += 1
        s.total += len(sample.records)
        s.kept += _records_kept(checkpoint, sample.records)
        s.tasks_ok += _task_kept(checkpoint, sample.task)
        target = checkpoint.diagnostics.target_tokens
        if checkpoint.strategy == "fallback":  # never under the summary and the active task
            messages = checkpoint.replacement_messages
            ends = [messages[0], messages[-1]] if len(messages) > 1 else messages[:1]
            target = max(target, counter.messages(ends))
        s.ratios[sample.name] = checkpoint.replacement_tokens / target
        s.reductions.append(1 - checkpoint.replacement_tokens / checkpoint.source_tokens)
        with contextlib.suppress(Exception):  # an audit failure is a figure here, not a crash
            verify_checkpoint(sample.state.context, checkpoint, counter)
            s.audits_ok += 1
    return s


def _path_figures(path: str, s: PathStats, n: int) -> list[Figure]:
    """The figures of one path over a corpus of `n` sessions."""
    name = f"compaction.{path}"
    pct = 100.0 * s.kept / s.total if s.total else 100.0
    task_pct = 100.0 * s.tasks_ok / len(s.ratios)
    worst = max(s.ratios, key=s.ratios.__getitem__)
    mean = statistics.mean(s.reductions)
    refused_kinds = ", ".join(sorted({name.rsplit("-", 1)[0] for name in s.refused})) or "none"
    reduction = (
        f"1 - replacement/source; median {statistics.median(s.reductions):.3f}, "
        f"least {min(s.reductions):.3f}; {len(s.refused)} of {n} sessions refused, nothing smaller "
        f"than the source (kinds: {refused_kinds})"
    )
    records = f"{s.kept}/{s.total} exact records under their own heading, {n} sessions"
    tasks = f"{s.tasks_ok}/{len(s.ratios)} sessions"
    return [
        Figure(f"{name}.records_verbatim", round(pct, 2), "%", "100 %", pct == 100.0, records),
        Figure(f"{name}.active_task_kept", round(task_pct, 2), "%", "100 %", task_pct == 100.0, tasks),
        Figure(
            f"{name}.max_replacement_over_target",
            round(s.ratios[worst], 3),
            "ratio",
            "<= 1.0",
            s.ratios[worst] <= 1.0,
            f"worst: {worst}",
        ),
        Figure(
            f"{name}.mean_reduction",
            round(mean, 3),
            "ratio",
            "> 0 (no checkpoint grows)",
            mean > 0 and min(s.reductions) >= 0,
            reduction,
        ),
    ]


def run(quick: bool) -> list[Figure]:
    """The `compaction` suite: the corpus through each path, then the audit."""
    samples = corpus(50 if quick else 150)
    counter = TokenCounter()
    stats = {path: _compact_corpus(samples, path, counter) for path in ("llm", "fallback")}
    n = len(samples)
    audits = sum(len(s.ratios) for s in stats.values())
    audits_ok = sum(s.audits_ok for s in stats.values())
    fell_back = ", ".join(f"{k} {v}" for k, v in sorted(stats["llm"].reasons.items())) or "none"
    audit = (
        f"re-derived from source + raw summary, no model; the summary taken in {stats['llm'].llm_used} of "
        f"{n} sessions (fell back: {fell_back})"
    )
    return [
        *(f for path, s in stats.items() for f in _path_figures(path, s, n)),
        Figure(
            "compaction.audit_rederived", audits_ok, "checkpoints", f"{audits}", audits_ok == audits, audit
        ),
    ]


if __name__ == "__main__":
    from cairn import bench

    sys.exit(bench.main(suite="compaction"))
