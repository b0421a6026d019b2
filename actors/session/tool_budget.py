"""What the model sees of tool output (CONTEXT-RULES X1-X3): a pure function of the recorded results.

The log keeps every result whole (large payloads as a `BlobPart` in the blob
store, X3). The model sees a rendering of it, decided here from the messages
alone, so a live session and a replayed one send byte-identical requests:

- X1 a result over 100,000 chars shows a 2,000-char preview;
- X2 the results answering one assistant message (one tool turn, M3) share
  200,000 chars; past that a result is cut to what is left, but never below
  the preview;
- a text blob shows its stored preview (all the text the log line holds);
  a binary blob that is not an image shows as a note only;
- whenever less than the whole output is shown, a note follows naming the full
  size and where the output is kept: `blob sha256:<hash>` for a blob, the
  session log (with the tool-result event's seq) for inline text.

A result's rendering depends only on itself and on the results of the same
turn before it, so appending results never changes an earlier rendering.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from cairn.events.model import BlobPart, ImagePart, Message, Part, TextPart, parts_of

#: X1: a result longer than this shows only the preview
RESULT_LIMIT = 100_000
PREVIEW_CHARS = 2_000
#: X2: chars of all results of one assistant turn together
TURN_LIMIT = 200_000

_WHY_X1 = f"over the {RESULT_LIMIT:,}-char limit of one tool result"
_WHY_X2 = f"this turn's {TURN_LIMIT:,}-char budget for tool output is used up"
_WHY_PREVIEW = "only a preview is stored inline"


#: what a tool may return and have kept whole, by default (`HostConfig.max_tool_output_chars`)
MAX_STORED_OUTPUT_CHARS = 1_000_000


def bound_stored(content: str | tuple[Part, ...], max_chars: int | None) -> str | tuple[Part, ...]:
    """A tool's output as it is stored: whole when its text is at most `max_chars` (or `max_chars` is
    None), else its text cut to the first and last halves of `max_chars`, after a first line that
    says so (the model's preview starts with it). Images and blobs pass unchanged; only text counts.
    """
    if max_chars is None:
        return content
    parts = parts_of(content)
    size = sum(len(p.text) for p in parts if isinstance(p, TextPart))
    if size <= max_chars:
        return content
    head, tail = max_chars // 2, max_chars - max_chars // 2
    notice = (
        f"[cairn kept {max_chars:,} of the {size:,} chars this tool returned (the host's "
        f"max_tool_output_chars): the first {head:,} and the last {tail:,}; the rest is not stored]\n"
    )
    out: list[Part] = []
    seen = 0
    for part in parts:
        if not isinstance(part, TextPart):
            out.append(part)
            continue
        start, end = seen, seen + len(part.text)
        seen = end
        keep_head = part.text[: max(0, head - start)]
        keep_tail = (
            part.text[max(0, len(part.text) - max(0, end - (size - tail))) :] if end > size - tail else ""
        )
        if len(keep_head) + len(keep_tail) >= len(part.text):
            kept = part.text
        else:
            kept = keep_head + (" [...] " if keep_head and keep_tail else "") + keep_tail
        if kept:
            out.append(TextPart(kept))
    if isinstance(content, str):
        return notice + "".join(p.text for p in out if isinstance(p, TextPart))
    return (TextPart(notice), *out)


def _is_text_blob(part: BlobPart) -> bool:
    return not part.media_type.startswith("image/") and (part.chars > 0 or bool(part.preview))


def content_chars(content: str | tuple[Part, ...]) -> int:
    """The full size of a message's text in chars: inline text plus text blobs' `chars`."""
    if isinstance(content, str):
        return len(content)
    total = 0
    for part in content:
        if isinstance(part, TextPart):
            total += len(part.text)
        elif isinstance(part, BlobPart) and _is_text_blob(part):
            total += max(part.chars, len(part.preview))
    return total


def _blob_name(part: BlobPart) -> str:
    return "blob sha256:" + part.sha256.removeprefix("sha256:")


def _note(shown: int, size: int, why: str, where: list[str]) -> str:
    kept = " and ".join(where)
    return (
        f"[tool output truncated: {shown:,} of {size:,} chars shown ({why}); "
        f"the full output ({size:,} chars) is kept in {kept}]"
    )


def _cut(message: Message, allowance: int, why: str) -> tuple[Message, int]:
    """Show at most `allowance` chars of the message's text; note what is left out."""
    content = message.content
    parts = parts_of(content)
    out: list[Part] = []
    shown = 0
    size = 0
    inline_cut = False
    blobs_cut: list[BlobPart] = []
    binary_notes: list[str] = []
    for part in parts:
        if isinstance(part, TextPart):
            size += len(part.text)
            take = part.text[: max(0, allowance - shown)]
            if len(take) < len(part.text):
                inline_cut = True
            if take:
                out.append(TextPart(take))
                shown += len(take)
        elif isinstance(part, ImagePart) or part.media_type.startswith("image/"):
            out.append(part)
        elif not _is_text_blob(part):
            binary_notes.append(
                f"[binary output ({part.media_type}, {part.size:,} bytes) is kept in {_blob_name(part)}]"
            )
        else:
            full = max(part.chars, len(part.preview))
            size += full
            take = part.preview[: max(0, allowance - shown)]
            if len(take) < full:
                blobs_cut.append(part)
            if take:
                out.append(TextPart(take))
                shown += len(take)
    where = [_blob_name(part) for part in blobs_cut]
    if inline_cut:
        seq = message.meta.seq
        where.append(f"the session log (tool-result event seq {seq})" if seq else "the session log")
    notes = [*binary_notes, _note(shown, size, why, where)] if where else binary_notes
    if isinstance(content, str):
        text = "".join(part.text for part in out if isinstance(part, TextPart))
        return msgspec.structs.replace(message, content="\n\n".join(filter(None, [text, *notes]))), shown
    out.extend(TextPart(note) for note in notes)
    return msgspec.structs.replace(message, content=tuple(out)), shown


def render_result(message: Message, remaining: int = TURN_LIMIT) -> tuple[Message, int]:
    """X1/X2: one tool result as the model sees it, given the turn's remaining chars.

    Returns the rendered message (the same object when nothing changes) and the
    chars of output it shows, which the caller takes from the turn's budget.
    """
    content = message.content
    if isinstance(content, str):
        size = len(content)
        if size <= RESULT_LIMIT and size <= remaining:
            return message, size
        has_blob = False
    else:
        size = 0
        for part in content:  # the common case first: text parts only, shown whole
            if type(part) is not TextPart:
                break
            size += len(part.text)
        else:
            if size <= RESULT_LIMIT and size <= remaining:
                return message, size
        size = content_chars(content)
        has_blob = any(isinstance(part, BlobPart) for part in content)
    limit, why = (PREVIEW_CHARS, _WHY_X1) if size > RESULT_LIMIT else (size, _WHY_PREVIEW)
    if limit > remaining:  # X2, but never below the preview
        cut = max(remaining, min(limit, PREVIEW_CHARS))
        if cut < limit:
            limit, why = cut, _WHY_X2
    if limit >= size and not has_blob:
        return message, size
    return _cut(message, limit, why)


def render_other(message: Message) -> Message:
    """A message that is not a tool result: only its blobs change (to preview and note)."""
    content = message.content
    if isinstance(content, str):
        return message
    for part in content:
        if isinstance(part, BlobPart):
            return _cut(message, content_chars(content), _WHY_PREVIEW)[0]
    return message


def render_turn(results: Sequence[Message]) -> tuple[Message, ...]:
    """X2: the results answering one assistant message, in order, sharing one budget."""
    used = 0
    out: list[Message] = []
    for result in results:
        rendered, shown = render_result(result, max(0, TURN_LIMIT - used))
        used += shown
        out.append(rendered)
    return tuple(out)


class TurnBudgets:
    """Renders a context message by message, in order, keeping X2's per-turn count.

    A tool result answering the open tool turn (M3: the latest assistant
    message with tool calls, until the next user or assistant message) draws
    on that turn's budget; any other result has a budget of its own. The walk
    is the same live and on replay, and can be resumed as messages are
    appended. Not thread-safe: one walk per owner. `HistoryView` walks the
    same way in its own loop (tests hold it to `render_context`): a change
    here is a change there.
    """

    __slots__ = ("_open", "_used")

    def __init__(self) -> None:
        self._open: frozenset[str] = frozenset()
        self._used = 0

    def render(self, message: Message) -> Message:
        role = message.role
        if role == "tool":
            opened = message.tool_call_id in self._open
            content = message.content
            if type(content) is tuple:  # render_result's common case, without the call
                size = 0
                for part in content:
                    if type(part) is not TextPart:
                        break
                    size += len(part.text)
                else:
                    if size <= RESULT_LIMIT and (size <= TURN_LIMIT - self._used if opened else True):
                        if opened:
                            self._used += size
                        return message
            if opened:
                rendered, shown = render_result(message, max(0, TURN_LIMIT - self._used))
                self._used += shown
                return rendered
            return render_result(message, TURN_LIMIT)[0]
        if role in ("user", "assistant"):
            calls = message.tool_calls
            self._open = frozenset([call.id for call in calls]) if calls else _NO_CALLS
            self._used = 0
        content = message.content
        if isinstance(content, str):  # render_other's common case, without the call
            return message
        return render_other(message)


_NO_CALLS: frozenset[str] = frozenset()


def render_context(messages: Sequence[Message]) -> tuple[Message, ...]:
    """The model-visible form of a whole context (one rendered message per message)."""
    walk = TurnBudgets()
    return tuple(walk.render(message) for message in messages)
