"""Size gates of compaction: the target (C10), the effect gate, and when manual compaction is due (K4).

| gate                  | rule                                                                  |
|-----------------------|-----------------------------------------------------------------------|
| target (C10)          | min(50,000, max(5,000, 80 % of source), 50 % of the window)           |
| budget cap (beyond)   | the target is also at most 50 % of the input budget (B1-B2)           |
| effect gate (C10)     | replacement tokens over the target: `insufficient-reduction`          |
| shrink (beyond)       | not smaller than the source: `insufficient-reduction`, never committed |
| progress (beyond)     | saving under 10 % of the source tokens: `insufficient-reduction` too  |
| reduction gate        | shrink + progress: the LLM path (with C10) and the fallback           |
| fallback (beyond F2)  | min(the capped target, 90 % of source); F2 raises it to the mandatory |
| manual (K4)           | nothing below 50 % of the window; unknown window or tokens: nothing   |
| room (beyond)         | at most the room for 2 turns below the compaction threshold (`room_for`) |

Every strategy must shrink: the LLM replacement and the fallback by at least
10 % (the reduction gate), R3's snip-only replacement at all (the shrink
gate; R3 takes any snip that removed something).

C10's floor of 5,000 tokens is above a small source, and F2 lets the
mandatory state (notice, task) raise the target further, so a fallback built
for the C10 target alone could keep the whole source and add to it (a
647-token context "compacted" to 790). The fallback is therefore built for
at most 90 % of the source (it cuts its tail instead), and the reduction
gate refuses what still saves less: then the mandatory state alone is over
90 % of the source. A fallback allowed to save a single token would be
committed again at every request past the threshold (L4), each time
dropping the oldest messages for nothing (a chaos-server run showed
3,081 -> 3,080 -> 3,079).

C10's 50 % of the window is measured against the window, not the input
budget the thresholds come from (B2-B3). In a small window the two part
ways: with 16,000 tokens the reserve is 8,192 (B1), the budget 7,808, the
compaction threshold 6,246, and C10's target up to 8,000, above the
threshold and the budget both. A replacement that met it left the context
due again: a long-run bench made 71 compactions in 1,000 turns there, 19 of
them on the very next turn, once at 102 % of the budget right after
compacting. So the target is also capped at half the input budget (the
budget cap): 20 points under the hand-off threshold (70 %), 30 under the
compaction threshold, room for the fixed context (system prompt, tools) and
a turn of progress. The share is the smallest multiple of 10 % that leaves
C10 untouched where it was made for: 50,000 is 43 % of a 128,000 window's
budget (115,200) and 28 % of a 200,000 window's (180,000), so every window
from 111,111 tokens up (usual reserve) gets exactly C10's target; 40 %
would cut a 128,000 window's to 46,080. Below 111,111 it tightens (a
64,000 window: 32,000 -> 27,904). In the 16,000-token long run (with snip)
shares from 40 % to 65 % gave the same figures, 69-70 compactions in 1,000
turns, none back-to-back, none still due (C10 alone: 71, 19, 19); a larger
share keeps more tail and leaves less room. An unknown budget (no window, a reserve that fills it)
leaves C10 as it is. The fallback works from the same target (F2), and F2
may still raise it to the mandatory state, never the reverse.

The room rule (beyond C10, `room_for`): a checkpoint must leave room below
the compaction threshold (B3: 80 % of the input budget) for at least
`ROOM_TURNS` (2) turns of the session's recent growth, the median size of
its last `RECENT_TURNS` (5) complete turns in the source (`turn_sizes`),
after the fixed part of every request (system prompt and tool schemas). Else
the next turn or the one after is due again: a 2,048-token window whose turns
grow by 500 tokens compacted on every turn from the fourth. So the target is
at most threshold - fixed - 2 x growth, wherever that is at least the
smallest replacement there is (the fallback's mandatory state, F1-F2); where
it is not, the target stays as C10 has it, and the checkpoint records that
it missed the room (`room_missed`), for the bench to count.

The threshold is in the provider's tokens (the window is the server's), the
replacement, the fixed part and the growth in cairn's (cl100k). Where the
provider counts more, a replacement that fits in cairn's count overflows in
the server's: on llama.cpp with SmolLM2, whose tokenizer counts 20 % more
than cl100k, a fallback checkpoint to 1,792 tokens made the next request
2,099 in cairn's count and 2,522 in the server's, and the turn after
compacted again. So the room is taken from the threshold as the provider
would count it in cairn's tokens: threshold x 1,000 / the provider's count
per 1,000 of cairn's (`provider_permille`, from the last response that
counted the same history, at most 2,000), never more than the threshold
itself (a provider that counts less leaves the rule as it was).

All arithmetic is on integers, so a figure never depends on float rounding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import pairwise
from typing import TypeGuard

import msgspec

from cairn.events.model import Message

TARGET_CAP = 50_000
TARGET_FLOOR = 5_000
MIN_SAVING_PERCENT = 10
#: (beyond C10) the target is at most this share of the input budget
BUDGET_SHARE_PERCENT = 50
#: the room rule: turns of growth a checkpoint leaves room for, and the turns its median is of
ROOM_TURNS = 2
RECENT_TURNS = 5
#: the room rule: the provider's count per 1,000 of cairn's is taken as at most this (a server
#: that reports twice cairn's count is counting something else, not a denser tokenizer)
PROVIDER_PERMILLE_CAP = 2_000


class GateVerdict(msgspec.Struct, frozen=True):
    """Whether a replacement passes, and why not when it does not."""

    passed: bool
    detail: str = ""


def effect_target(source_tokens: int, context_window: int | None, input_budget: int | None = None) -> int:
    """C10: the most tokens a replacement may have; (beyond) at most half the `input_budget` too."""
    target = min(TARGET_CAP, max(TARGET_FLOOR, source_tokens * 8 // 10))
    if _count(context_window) and context_window > 0:
        target = min(target, context_window // 2)
    if _count(input_budget) and input_budget > 0:
        target = min(target, input_budget * BUDGET_SHARE_PERCENT // 100)
    return target


def _count(value: object) -> TypeGuard[int]:
    """An int that is not a bool (True is an int to Python, never a count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def fallback_target(target: int, source_tokens: int) -> int:
    """The target the fallback is built for: the C10 `target`, but at most 90 % of the source, the
    most that passes the reduction gate (F2 may raise it to the mandatory state)."""
    return max(0, min(target, source_tokens * (100 - MIN_SAVING_PERCENT) // 100))


def shrink_gate(source_tokens: int, replacement_tokens: int) -> GateVerdict:
    """Every strategy: a replacement must be smaller than its source (`insufficient-reduction`)."""
    if replacement_tokens >= source_tokens:
        return GateVerdict(
            False,
            f"replacement {replacement_tokens} tokens is not smaller than its source "
            f"({source_tokens} tokens)",
        )
    return GateVerdict(True)


def effect_gate(source_tokens: int, replacement_tokens: int, target: int) -> GateVerdict:
    """C10 plus the reduction gate: each failure is `insufficient-reduction`."""
    if replacement_tokens > target:
        return GateVerdict(False, f"replacement {replacement_tokens} tokens, over target {target}")
    return reduction_gate(source_tokens, replacement_tokens)


def reduction_gate(source_tokens: int, replacement_tokens: int) -> GateVerdict:
    """Smaller than the source, by at least 10 % of it (the LLM path and the fallback)."""
    shrink = shrink_gate(source_tokens, replacement_tokens)
    if not shrink.passed:
        return shrink
    saved = source_tokens - replacement_tokens
    if saved * 100 < source_tokens * MIN_SAVING_PERCENT:
        return GateVerdict(
            False,
            f"replacement {replacement_tokens} tokens saves under {MIN_SAVING_PERCENT} % of {source_tokens}",
        )
    return GateVerdict(True)


def manual_compaction_due(projected_tokens: int | None, context_window: int | None) -> bool:
    """K4: `host.compact(session)` compacts only from 50 % of the window up."""
    if not isinstance(projected_tokens, int) or not isinstance(context_window, int):
        return False
    if context_window <= 0 or projected_tokens < 0:
        return False
    return projected_tokens * 2 >= context_window


def starts_turn(message: Message) -> bool:
    """A message the user sent (not one cairn synthesized: summary, task, hand-off, marker)."""
    return message.role == "user" and not message.meta.origin and not message.meta.hidden


def turn_sizes(
    messages: Sequence[Message], count: Callable[[Sequence[Message]], int], last: int = RECENT_TURNS
) -> list[int]:
    """The tokens of the last `last` complete turns of `messages` (oldest first): each from a user's
    message up to the next one; the open turn (after the last) and what precedes the first are not
    turns. Only those turns are counted, so a long source costs no more than its recent turns."""
    starts = [i for i, message in enumerate(messages) if starts_turn(message)]
    spans = list(pairwise(starts))[-last:]
    return [count(messages[start:end]) for start, end in spans]


def median_growth(sizes: Sequence[int]) -> int | None:
    """The median of `sizes` (the lower middle of an even count), None when there are none."""
    if not sizes:
        return None
    ordered = sorted(sizes)
    return ordered[(len(ordered) - 1) // 2]


def room_for(
    input_budget: int | None, fixed_tokens: int, growth: int | None, provider_permille: int | None = None
) -> int:
    """The room rule's target: the compaction threshold (80 % of the budget, in cairn's count where
    the provider counts `provider_permille` per 1,000 of cairn's tokens and that is over 1,000) -
    `fixed_tokens` - `ROOM_TURNS` x `growth`. 0 means no rule (the budget or the growth is
    unknown); a room that is used up is 1, which no replacement fits."""
    if not _count(input_budget) or input_budget <= 0 or growth is None:
        return 0
    threshold = input_budget * 8 // 10
    if _count(provider_permille) and provider_permille > 1_000:
        threshold = threshold * 1_000 // min(provider_permille, PROVIDER_PERMILLE_CAP)
    return max(1, threshold - fixed_tokens - ROOM_TURNS * growth)


def provider_permille(provider_tokens: int | None, cairn_tokens: int) -> int | None:
    """How many tokens the provider counted per 1,000 of cairn's for the same request (rounded
    down); None when either count is unknown or not positive."""
    if not _count(provider_tokens) or provider_tokens <= 0 or cairn_tokens <= 0:
        return None
    return provider_tokens * 1_000 // cairn_tokens
