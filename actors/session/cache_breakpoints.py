"""Where a request may put prompt-cache breakpoints: the stable prefixes of a session's context.

A provider with prompt caching (Anthropic's `cache_control`) caches the
prompt prefix that ends at each breakpoint, and a later request whose prompt
starts with a cached prefix reads it instead of paying for it again. A
provider takes at most four breakpoints; it puts its own at the end of the
tool schemas and of the system prompt, and the session chooses at most two
more, as indexes into the messages it sends (`ProviderRequest.cache_breakpoints`):

| breakpoint              | stable until                                       |
|-------------------------|----------------------------------------------------|
| the checkpoint's summary, when history starts with one | the next checkpoint |
| the newest history message | the next slimming or checkpoint; a later request reads it |

The newest history message is the last message before the hidden hand-off
(H4), which a request carries after history: the hand-off stays last while
history grows under it, so a breakpoint on it would cache a prefix that no
later request repeats. The summary's breakpoint keeps the prefix through
the summary read from the cache after a slimming, which removes only tool
turns after it (S1). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

from cairn.actors.compactor.ledger import SUMMARY_ORIGINS
from cairn.events.model import Message

#: the origin of the hidden hand-off message (H4), which a request carries last
HANDOFF_ORIGIN = "handoff"


def cache_breakpoints(messages: Sequence[Message], *, history_start: int) -> tuple[int, ...]:
    """The indexes after which a request of `messages` may put a cache breakpoint, ascending.

    `history_start` is the index of the first history message (the count of
    system messages before it). At most two: the checkpoint's summary when
    history starts with one, and the newest history message; none when there
    is no history.
    """
    end = len(messages)
    while end > history_start and messages[end - 1].meta.origin == HANDOFF_ORIGIN:
        end -= 1
    if end <= history_start:
        return ()
    points: list[int] = []
    if messages[history_start].meta.origin in SUMMARY_ORIGINS:
        points.append(history_start)
    if not points or points[-1] != end - 1:
        points.append(end - 1)
    return tuple(points)
