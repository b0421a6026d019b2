"""The pre-compaction hook (C2): what the host sees before a compaction, and how it blocks one."""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from cairn.events.kinds import Trigger


class HookContext(msgspec.Struct, frozen=True, kw_only=True):
    """What a pre-compaction hook is shown (C2)."""

    session: str
    workspace: str
    trigger: Trigger
    message_count: int
    tokens: int


class HookVerdict(msgspec.Struct, frozen=True):
    """A hook's answer: `block=True` refuses the compaction (C3)."""

    block: bool = False
    reason: str = ""


#: Runs on the compactor's thread; returning None lets the compaction go on.
PreCompactionHook = Callable[[HookContext], HookVerdict | None]
