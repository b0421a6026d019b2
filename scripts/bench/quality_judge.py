"""The quality bench's judge: a real model answers each probe's question before and after compaction.

Only with `--provider openai` and `CAIRN_BENCH_JUDGE=1`: the same endpoint gets two requests a
session, the full context (before) and the summarizer's after its last compaction (after), each as a
`[i] role: text` transcript followed by the numbered probe questions. An answer is right when it
contains the fact's `answer` (case-insensitive); a superseded fact asks its replacement's question and
is *answered stale* when the line holds the old value and not the new one. The figure is accuracy
after over accuracy before.

The request must fit the endpoint's window (`CAIRN_CONTEXT_WINDOW`, with the tokenizer margin and the
answer's room). When a corpus session does not (a 4,096-token local model holds none of its
7,000-20,000-token sessions), the judge asks about its own set (`judge_set`): the same shapes and
planted facts from per-session seeds, each at the largest filler scale (`JUDGE_SCALES`) at which it
fits. A session that fits at no scale, or whose request fails, is counted as not judged, with why.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from cairn.actors.compactor.prompt import render_message
from cairn.actors.compactor.sampling import TOKENIZER_MARGIN_PERCENT
from cairn.actors.provider.base import (
    Provider,
    ProviderFailure,
    ProviderRequest,
    TextDelta,
    endpoint_output_cap,
    endpoint_window,
)
from cairn.actors.session.tool_budget import render_context
from cairn.actors.tokens import TokenCounter
from cairn.bench.quality_builder import Fact, Session
from cairn.bench.quality_corpus import KINDS, build_session
from cairn.bench.quality_probe import Probe, Run, run_strategy
from cairn.events.model import Message

JUDGE_ENV = "CAIRN_BENCH_JUDGE"
JUDGE_SYSTEM = (
    "You answer questions about the working conversation of a coding agent shown below, using only "
    "what it says. Answer each numbered question on one line that starts with its number, quoting "
    "exact names, paths, commands and numbers. When a value changed, give the latest one. When the "
    "conversation does not say, answer 'unknown'."
)
#: chars of one message in the judge's transcript (a context already fits the window)
JUDGE_CHAR_CAP = 20_000
#: the most output tokens one judge answer asks for (at most the endpoint's cap and a third of its window)
JUDGE_OUTPUT_TOKENS = 2_000
#: the filler scales the judge's own set tries for a session, largest first
JUDGE_SCALES = (1.0, 0.5, 0.25, 0.125, 0.0)
#: the judge set's seed (the corpus stays byte-identical without it)
JUDGE_SEED = 20_261_206
_ANSWER_RE = re.compile(r"^\s*(\d+)\s*[.):]\s*(.*)$")


def parse_answers(text: str, count: int) -> list[str]:
    """Line `n.` of the reply for each question 1..count ('' when missing)."""
    answers = [""] * count
    for line in text.splitlines():
        match = _ANSWER_RE.match(line)
        if match is not None and 1 <= int(match.group(1)) <= count:
            answers[int(match.group(1)) - 1] = match.group(2).strip()
    return answers


def judge_messages(context: Sequence[Message], questions: Sequence[str]) -> tuple[Message, Message]:
    """The judge's request: the transcript of `context`, then the numbered questions."""
    rendered = render_context(context)
    transcript = "\n".join(render_message(i, m, JUDGE_CHAR_CAP) for i, m in enumerate(rendered))
    numbered = "\n".join(f"{n}. {q}" for n, q in enumerate(questions, start=1))
    body = f"Conversation:\n{transcript}\n\nQuestions:\n{numbered}"
    return (
        Message(role="system", content=JUDGE_SYSTEM, id="judge-instructions"),
        Message(role="user", content=body, id="judge-questions"),
    )


def judge_set_session(kind: str, index: int, scale: float) -> Session:
    """The judge set's `index`-th session of `kind` at filler `scale`, from a seed of its own (so that
    each session's scale is chosen alone)."""
    return build_session(kind, index, random.Random(f"{JUDGE_SEED}:{kind}:{index}"), scale)


def judge_set(per_kind: int, fits: Callable[[Session], bool]) -> list[tuple[Session, float]]:
    """`per_kind` sessions of every kind, each at the largest of `JUDGE_SCALES` at which it `fits`
    (the smallest when none does), with that scale."""
    chosen: list[tuple[Session, float]] = []
    for index in range(per_kind):
        for kind in KINDS:
            for scale in JUDGE_SCALES:
                session = judge_set_session(kind, index, scale)
                if fits(session):
                    break
            chosen.append((session, scale))
    return chosen


def _right(fact: Fact | None, answer: str) -> bool:
    return fact is not None and bool(fact.answer) and fact.answer.lower() in answer.lower()


@dataclass
class Judge:
    """`provider`'s model answering each session's probe questions from the full context (before) and
    the summarizer's (after), as `evaluate`'s hook: the right answers, the stale ones, and the sessions
    not judged, with why."""

    provider: Provider
    model: str
    counter: TokenCounter
    asked: int = 0
    before: int = 0
    after: int = 0
    superseded: int = 0
    stale_before: int = 0
    stale_after: int = 0
    by_kind: dict[str, list[int]] = field(default_factory=dict)  # kind -> [asked, before, after]
    judged: int = 0
    skipped: Counter[str] = field(default_factory=Counter)

    def ratio(self) -> float | None:
        """Accuracy after over before; None when nothing was right before (it measures nothing)."""
        return self.after / self.before if self.before else None

    def answer_room(self) -> int:
        cap, window = endpoint_output_cap(self.provider), endpoint_window(self.provider)
        room = JUDGE_OUTPUT_TOKENS if cap is None else min(JUDGE_OUTPUT_TOKENS, cap)
        return room if window is None else min(room, window // 3)

    def misfit(self, messages: Sequence[Message]) -> str | None:
        """Why `messages` and the answer's room do not fit the endpoint's window, or None."""
        window = endpoint_window(self.provider)
        tokens = self.counter.messages(messages) * (100 + TOKENIZER_MARGIN_PERCENT) // 100
        if window is None or tokens + self.answer_room() <= window:
            return None
        return f"the full context does not fit the endpoint's {window:,}-token window"

    def fits(self, session: Session) -> bool:
        """Whether the request about `session` (its full context, every question it plants) fits."""
        context = run_strategy(session, "ceiling", self.counter).context
        questions = [f.question for f in session.facts if f.question]
        return self.misfit(judge_messages(context, questions)) is None

    def ask(self, context: Sequence[Message], questions: Sequence[str], rid: str) -> list[str]:
        request = ProviderRequest(
            model=self.model,
            messages=judge_messages(context, questions),
            purpose="turn",
            temperature=0.0,
            max_output_tokens=self.answer_room(),
            request_id=rid,
        )
        text = "".join(out.text for out in self.provider.stream(request) if isinstance(out, TextDelta))
        return parse_answers(text, len(questions))

    def __call__(self, session: Session, probes: Sequence[Probe], runs: dict[str, Run]) -> None:
        """Ask `session`'s probe questions of the full context and of the summarizer's; add them up."""
        asked = [p.fact for p in probes if p.fact.question]
        if not asked:
            return
        questions = [f.question for f in asked]
        full, compacted = runs["ceiling"].context, runs["summarizer"].context
        why = self.misfit(judge_messages(full, questions))
        if why is None:
            try:
                before = self.ask(full, questions, f"judge:{session.name}:before")
                after = self.ask(compacted, questions, f"judge:{session.name}:after")
            except ProviderFailure as failure:
                why = f"the judge's request failed: {failure.error_class}"
        if why is not None:
            self.skipped[why] += 1
            return
        self.judged += 1
        by_key = {f.key: f for f in session.facts}
        for fact, old, new in zip(asked, before, after, strict=True):
            if fact.kind == "superseded":
                replacing = by_key.get(fact.replaced_by)
                self.superseded += 1
                self.stale_before += _right(fact, old) and not _right(replacing, old)
                self.stale_after += _right(fact, new) and not _right(replacing, new)
                continue
            counts = self.by_kind.setdefault(fact.kind, [0, 0, 0])
            counts[0] += 1
            counts[1] += _right(fact, old)
            counts[2] += _right(fact, new)
            self.asked += 1
            self.before += _right(fact, old)
            self.after += _right(fact, new)
