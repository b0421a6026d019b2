"""What a `context-slimmed` event removes from a context: the one definition, for the fold and audits."""

from __future__ import annotations

from collections.abc import Iterable

from cairn.events.model import Message


def remove_tool_turns(
    context: Iterable[Message], call_ids: Iterable[str]
) -> tuple[list[Message], int | None]:
    """The context without the tool turns of `call_ids` (S1, S5), and where the first one was.

    An assistant message goes when all its calls are named (its text goes
    with it, S3); a tool result goes when its call is named. This is the one
    definition of what a `context-slimmed` event removes, shared by the fold
    and by checkpoint audits.
    """
    messages = list(context)
    keep, first_removed = kept_indexes(messages, call_ids)
    return [messages[index] for index in keep], first_removed


def kept_indexes(context: list[Message], call_ids: Iterable[str]) -> tuple[list[int], int | None]:
    """`remove_tool_turns` by index: the indexes kept, and where the first removed one was among them."""
    removed = set(call_ids)
    keep: list[int] = []
    first_removed: int | None = None
    for index, message in enumerate(context):
        drop = (
            message.role == "assistant"
            and bool(message.tool_calls)
            and all(call.id in removed for call in message.tool_calls)
        ) or (message.role == "tool" and message.tool_call_id in removed)
        if drop:
            if first_removed is None:
                first_removed = len(keep)
            continue
        keep.append(index)
    return keep, first_removed
