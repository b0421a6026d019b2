"""The quality bench's judge: a model answers each probe's question before and after compaction.

Only with a real model (`cairn bench --only quality --provider openai` and
`CAIRN_BENCH_JUDGE=1`); the same `CAIRN_*` endpoint answers. For every
session, two requests: the full uncompacted context (before) and the
summarizer's effective context after its last compaction (after), each
rendered as a `[i] role: text` transcript (X1-X2 applied, tool calls shown,
images as the M4 placeholder), followed by the session's probe questions,
numbered. The model answers one numbered line per question.

The judge must read the whole history it is asked about, so a session
must fit the endpoint's window (the adapter's `context_window`,
`CAIRN_CONTEXT_WINDOW`: the transcript counted here, 30 % more for the
server's tokenizer, plus the answer's room: `answer_room`, which is also
what the answer asks for, at most the endpoint's output cap). When every
corpus session fits,
the judge asks about the corpus. Otherwise (a 4,096-token local model holds
none of its 7,000-20,000-token sessions) it asks about its own set
(`judge_set`): the same shapes and planted facts from per-session seeds,
each built with the largest filler scale (1, 1/2, 1/4, 1/8, 0: the share of
filler tool calls between the facts) at which it fits, and run through the
same strategies and summarizer. A session that fits at no scale (a huge
tool output alone can fill a small window), or whose request fails, is not
judged: it is counted with the reason, and the figure says how many were.

An answer is right when it contains the fact's `answer` string
(case-insensitive). A superseded fact asks its replacement's question; it
is *answered stale* when the line contains the old value and not the new
one. The figure is accuracy after over accuracy before: what compaction
cost the model, measured by the model.
"""

from __future__ import annotations

import random
import re
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
#: the most output tokens one judge answer asks for
JUDGE_OUTPUT_TOKENS = 2_000
#: the filler scales the judge's own set tries for a session, largest first
JUDGE_SCALES = (1.0, 0.5, 0.25, 0.125, 0.0)
#: the judge set's seed (the corpus stays byte-identical without it)
JUDGE_SEED = 20_261_206
_ANSWER_RE = re.compile(r"^\s*(\d+)\s*[.):]\s*(.*)$")


@dataclass
class JudgeScore:
    """Right answers before (full context) and after (compacted) compaction, and stale ones."""

    asked: int = 0
    before: int = 0
    after: int = 0
    superseded: int = 0
    stale_before: int = 0
    stale_after: int = 0
    by_kind: dict[str, list[int]] = field(default_factory=dict)  # kind -> [asked, before, after]
    judged: int = 0
    #: why sessions were not judged, and how many
    skipped: dict[str, int] = field(default_factory=dict)

    def ratio(self) -> float | None:
        """Accuracy after over accuracy before; None when nothing was right before (a judge that
        cannot answer from the full context measures nothing about compaction)."""
        return self.after / self.before if self.before else None


def transcript(messages: Sequence[Message]) -> str:
    return "\n".join(render_message(i, m, JUDGE_CHAR_CAP) for i, m in enumerate(render_context(messages)))


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
    numbered = "\n".join(f"{n}. {q}" for n, q in enumerate(questions, start=1))
    body = f"Conversation:\n{transcript(context)}\n\nQuestions:\n{numbered}"
    return (
        Message(role="system", content=JUDGE_SYSTEM, id="judge-instructions"),
        Message(role="user", content=body, id="judge-questions"),
    )


def answer_room(provider: Provider) -> int:
    """The output tokens a judge answer asks for: `JUDGE_OUTPUT_TOKENS`, no more than the endpoint's
    output cap (`CAIRN_MAX_OUTPUT_TOKENS`) nor a third of its window, when the adapter knows them."""
    room = JUDGE_OUTPUT_TOKENS
    cap, window = endpoint_output_cap(provider), endpoint_window(provider)
    if cap is not None:
        room = min(room, cap)
    return room if window is None else min(room, window // 3)


def misfit(provider: Provider, messages: Sequence[Message], counter: TokenCounter) -> str | None:
    """Why `messages` and the answer's room do not fit the provider's endpoint window, or None."""
    window = endpoint_window(provider)
    if window is None:
        return None
    tokens = counter.messages(messages) * (100 + TOKENIZER_MARGIN_PERCENT) // 100
    if tokens + answer_room(provider) <= window:
        return None
    return f"the full context does not fit the endpoint's {window:,}-token window"


def fits_window(provider: Provider, session: Session, counter: TokenCounter) -> bool:
    """Whether the judge's request about `session` (its full context, every question it plants)
    fits the provider's endpoint window."""
    context = run_strategy(session, "ceiling", counter).context
    questions = [f.question for f in session.facts if f.question]
    return misfit(provider, judge_messages(context, questions), counter) is None


def judge_set_session(kind: str, index: int, scale: float, seed: int = JUDGE_SEED) -> Session:
    """The judge set's `index`-th session of `kind` at filler `scale`, from a seed of its own (so that
    each session's scale is chosen alone)."""
    return build_session(kind, index, random.Random(f"{seed}:{kind}:{index}"), scale)


def judge_set(
    per_kind: int, fits: Callable[[Session], bool], seed: int = JUDGE_SEED
) -> list[tuple[Session, float]]:
    """`per_kind` sessions of every kind, each at the largest of `JUDGE_SCALES` at which it `fits`
    (the smallest when none does), with that scale."""
    chosen: list[tuple[Session, float]] = []
    for index in range(per_kind):
        for kind in KINDS:
            for scale in JUDGE_SCALES:
                session = judge_set_session(kind, index, scale, seed)
                if fits(session):
                    break
            chosen.append((session, scale))
    return chosen


def ask(
    provider: Provider, model: str, context: Sequence[Message], questions: Sequence[str], rid: str
) -> list[str]:
    """One judge request: the transcript of `context`, then the numbered questions."""
    request = ProviderRequest(
        model=model,
        messages=judge_messages(context, questions),
        purpose="turn",
        temperature=0.0,
        max_output_tokens=answer_room(provider),
        request_id=rid,
    )
    text = "".join(out.text for out in provider.stream(request) if isinstance(out, TextDelta))
    return parse_answers(text, len(questions))


def _right(fact: Fact, answer: str) -> bool:
    return bool(fact.answer) and fact.answer.lower() in answer.lower()


def judge_session(
    score: JudgeScore,
    provider: Provider,
    model: str,
    session: Session,
    probes: Sequence[Probe],
    runs: dict[str, Run],
) -> None:
    """Ask `session`'s probe questions of the full context and of the summarizer's; add to `score`."""
    asked = [p.fact for p in probes if p.fact.question]
    if not asked:
        return
    by_key = {f.key: f for f in session.facts}
    questions = [f.question for f in asked]
    why = misfit(provider, judge_messages(runs["ceiling"].context, questions), TokenCounter())
    if why is not None:
        score.skipped[why] = score.skipped.get(why, 0) + 1
        return
    try:
        before = ask(provider, model, runs["ceiling"].context, questions, f"judge:{session.name}:before")
        after = ask(provider, model, runs["summarizer"].context, questions, f"judge:{session.name}:after")
    except ProviderFailure as failure:
        why = f"the judge's request failed: {failure.error_class}"
        score.skipped[why] = score.skipped.get(why, 0) + 1
        return
    score.judged += 1
    for fact, old, new in zip(asked, before, after, strict=True):
        if fact.kind == "superseded":
            replacing = by_key.get(fact.replaced_by)
            score.superseded += 1
            score.stale_before += _right(fact, old) and not (replacing is not None and _right(replacing, old))
            score.stale_after += _right(fact, new) and not (replacing is not None and _right(replacing, new))
            continue
        score.asked += 1
        score.before += _right(fact, old)
        score.after += _right(fact, new)
        counts = score.by_kind.setdefault(fact.kind, [0, 0, 0])
        counts[0] += 1
        counts[1] += _right(fact, old)
        counts[2] += _right(fact, new)
