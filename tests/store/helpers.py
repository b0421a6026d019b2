"""Small builders shared by the store tests."""

from __future__ import annotations

from pathlib import Path

from cairn.events.kinds import CheckpointCommitted, EventBase, SessionStarted, Usage
from cairn.events.model import Message, TextPart
from cairn.events.state import user_text_message
from cairn.store import Journal


def started(workspace: str = "/work/repo", model: str = "m-1") -> SessionStarted:
    return SessionStarted(workspace=workspace, model=model, context_window=100_000)


def msg(i: int, text: str | None = None) -> EventBase:
    return user_text_message(f"u{i}", text if text is not None else f"message {i}")


def usage(i: int) -> Usage:
    return Usage(request_id=f"r{i}", prompt_tokens=100 + i, completion_tokens=5, total_tokens=105 + i)


def checkpoint(epoch: int, through: int) -> CheckpointCommitted:
    return CheckpointCommitted(
        version=1,
        epoch=epoch,
        through_seq=through,
        trigger="threshold",
        strategy="fallback",
        source_tokens=1000,
        replacement_tokens=100,
        replacement_messages=(
            Message(role="user", content=(TextPart(f"summary of epoch {epoch}"),), id=f"sum{epoch}"),
        ),
    )


def fill(journal: Journal, sid: str, count: int, *, start_text: str = "") -> int:
    """Start `sid` and append `count` more user messages one by one; return the last seq."""
    seq = journal.last_seq(sid)
    if seq == 0:
        journal.append(sid, [started()], expected_seq=0)
        seq = 1
    for i in range(count):
        journal.append(sid, [msg(seq + i, f"{start_text}{sid} {seq + i}")], expected_seq=seq + i)
    return seq + count


def segment_files(root: Path) -> list[Path]:
    return sorted((root / "log").glob("*.jsonl"))
