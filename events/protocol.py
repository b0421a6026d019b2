"""Protocol strings more than one part of cairn writes or reads, byte for byte (CONTEXT-RULES).

They live here, below every actor, so that the session, the compactor and
the scripted provider share them without importing one another: the snip
marker (S1) the session writes and the compactor's audit re-derives, and the
summary ledger's seven headings (C7) and exact-record prefix (C8) that the
compactor asks for and checks and that the scripted provider writes.
"""

from __future__ import annotations

#: C7: the seven headings of a summary, in order, each once
HEADINGS: tuple[str, ...] = (
    "Objective and constraints",
    "Decisions and rationale",
    "Workspace mutations",
    "Verification evidence",
    "Active tasks and background work",
    "Open risks or blockers",
    "Exact next action",
)

#: C8: a source line `EXACT CONTINUATION RECORD [<heading>] :: <payload>` is an exact record
RECORD_PREFIX = "EXACT CONTINUATION RECORD"


def marker_text(count: int) -> str:
    """S1: the system marker that stands where `count` snipped tool interactions were."""
    noun = "interaction was" if count == 1 else "interactions were"
    return (
        f"[{count} earlier tool {noun} snipped from this conversation to save context. "
        "Their output is no longer shown; run a tool again if you need it.]"
    )
