"""The deterministic fallback (F1-F5): a replacement built without any model, never over target.

1. Mandatory state = the fallback summary (F1: the notice, and the C8
   ledger of the records when there are any, their next actions settled by
   the spent rule, `ledger`) + the active-task checkpoint.
2. target = max(tokens(mandatory), the target given); budget = target -
   tokens(mandatory) (F2). The service gives C10's target, at most 90 % of
   the source (`gates.fallback_target`); an auditor gives the recorded one.
3. When the task is at most 6,000 chars, the last user message equal to it is
   left out of the tail: the checkpoint already carries it (F3).
4. Units are walked newest first (F4): orphan results and calls without a
   result are dropped, content is flattened (images become the placeholder),
   reasoning is dropped, and an earlier checkpoint's file and task reminders
   are left out (the new checkpoint carries fresh ones). A unit that fits is
   kept whole; the first that does not is cut to fit (the largest
   per-message char cap found by binary search, head 3/4, marker, tail) when
   it can be, and the walk stops there. It stops too before a unit that
   would take the replacement over K1's 4,096 messages.
5. Replacement = [summary, kept tail in order, task]; because counting is
   additive (T1) its tokens are the sum of its parts, and they never exceed
   the target: `FallbackOverTarget` is raised if they ever do (F5)."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from cairn.actors.compactor.active_task import TASK_VERBATIM_CHARS
from cairn.actors.compactor.errors import FallbackOverTarget
from cairn.actors.compactor.replacement import SUPERSEDED_ORIGINS
from cairn.actors.tokens import TokenCounter
from cairn.events.kinds import MAX_REPLACEMENT_MESSAGES
from cairn.events.model import Message, text_of, units

#: a unit that could keep fewer chars than this per message is not worth cutting
MIN_CUT_CHARS = 64
#: at most this many chars per token are assumed when bounding the cut's search
_CHARS_PER_TOKEN_BOUND = 32


class FallbackPlan(msgspec.Struct, frozen=True, kw_only=True):
    """The fallback replacement and how it was reached."""

    replacement: tuple[Message, ...]
    tokens: int
    target: int
    kept_messages: int
    omitted_messages: int
    truncated_messages: int


def flatten(message: Message) -> Message:
    """F4: content as plain text (images as the placeholder), no reasoning."""
    if isinstance(message.content, str) and message.reasoning is None and not message.reasoning_blocks:
        return message
    return msgspec.structs.replace(message, content=text_of(message), reasoning=None, reasoning_blocks=())


def cut_text(text: str, cap: int) -> str:
    """Keep `cap` chars: head 3/4, a marker, tail 1/4."""
    if len(text) <= cap:
        return text
    head = cap * 3 // 4
    tail = cap - head
    marker = f"\n[... {len(text) - head - tail} chars cut by compaction ...]\n"
    return f"{text[:head]}{marker}{text[len(text) - tail :]}"


def _cut(unit: Sequence[Message], cap: int) -> list[Message]:
    out: list[Message] = []
    for message in unit:
        text = message.content
        assert isinstance(text, str)  # flattened
        if len(text) <= cap:
            out.append(message)
            continue
        meta = msgspec.structs.replace(
            message.meta, truncated=True, original_chars=message.meta.original_chars or len(text)
        )
        out.append(msgspec.structs.replace(message, content=cut_text(text, cap), meta=meta))
    return out


def _clean_unit(unit: Sequence[Message], skip_id: int | None) -> list[Message]:
    """F4: one unit with orphans and unanswered calls removed, flattened."""
    head = unit[0]
    if head.meta.origin in SUPERSEDED_ORIGINS:
        return []  # an earlier checkpoint's reminder: the new one carries a fresh copy
    if head.role == "tool":
        return []  # an orphan result: its call is gone
    if len(unit) == 1 and id(head) == skip_id:
        return []
    if not head.tool_calls:
        return [flatten(head)]
    answered = {m.tool_call_id for m in unit[1:]}
    calls = tuple(call for call in head.tool_calls if call.id in answered)
    if not calls:
        return [flatten(msgspec.structs.replace(head, tool_calls=()))] if text_of(head) else []
    call = head if calls == head.tool_calls else msgspec.structs.replace(head, tool_calls=calls)
    return [flatten(call), *(flatten(m) for m in unit[1:])]


def _largest_fitting_cut(unit: list[Message], budget: int, counter: TokenCounter) -> list[Message] | None:
    longest = max(len(m.content) for m in unit if isinstance(m.content, str))
    lo, hi = MIN_CUT_CHARS, min(longest, max(budget, 1) * _CHARS_PER_TOKEN_BOUND)
    best: list[Message] | None = None
    while lo <= hi:
        mid = (lo + hi) // 2
        candidate = _cut(unit, mid)
        if counter.messages(candidate) <= budget:
            best, lo = candidate, mid + 1
        else:
            hi = mid - 1
    return best


def fit_tail(
    source: Sequence[Message],
    summary: Message,
    task_message: Message | None,
    task: str,
    target: int,
    counter: TokenCounter,
) -> FallbackPlan:
    """Beyond C9: the model's `summary` with the tail fitted as F2-F5 fit the fallback's, for an LLM
    replacement whose C9 tail took it over `target` (no restored files: they can be read again)."""
    return plan_fallback(
        source, summary=summary, task_message=task_message, task=task, target=target, counter=counter
    )


def plan_fallback(
    source: Sequence[Message],
    *,
    summary: Message,
    task_message: Message | None,
    task: str,
    target: int,
    counter: TokenCounter,
) -> FallbackPlan:
    """F1-F5: the fallback replacement of `source` for `target` (raised to the mandatory state, F2)."""
    mandatory = [summary] if task_message is None else [summary, task_message]
    mandatory_tokens = counter.messages(mandatory)
    target = max(mandatory_tokens, target)  # F2: mandatory state raises the target
    budget = target - mandatory_tokens
    room = MAX_REPLACEMENT_MESSAGES - len(mandatory)
    skip_id: int | None = None
    if task and len(task) <= TASK_VERBATIM_CHARS:  # F3
        for message in reversed(source):
            if message.role == "user" and text_of(message) == task:
                skip_id = id(message)
                break
    kept: list[list[Message]] = []
    kept_count = 0
    truncated = 0
    for start, end in reversed(units(source)):
        unit = _clean_unit(source[start:end], skip_id)
        if not unit:
            continue
        if kept_count + len(unit) > room:
            break
        tokens = counter.messages(unit)
        if tokens <= budget:
            kept.append(unit)
            kept_count += len(unit)
            budget -= tokens
            continue
        cut = _largest_fitting_cut(unit, budget, counter)
        if cut is not None:
            kept.append(cut)
            kept_count += len(cut)
            truncated += sum(1 for a, b in zip(unit, cut, strict=True) if a is not b)
        break
    tail = [message for unit in reversed(kept) for message in unit]
    replacement = (*mandatory[:1], *tail, *mandatory[1:])
    tokens = counter.messages(replacement)
    if tokens > target:
        raise FallbackOverTarget(f"fallback replacement has {tokens} tokens, over its target {target}")
    return FallbackPlan(
        replacement=replacement,
        tokens=tokens,
        target=target,
        kept_messages=len(tail),
        omitted_messages=len(source) - len(tail),
        truncated_messages=truncated,
    )
