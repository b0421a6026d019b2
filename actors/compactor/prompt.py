"""The summary prompt (C7, C12) and its shrinking on overflow (C6).

The prompt is two messages: a system message with the ledger contract and a
user message with the transcript (`[i] role: text`, M4 text capped per
message) and the restored files as headed fenced blocks. It is pure text:
images never reach the summary model, they are the M4 placeholder (C12).

Shrink steps (C6), one per context-limit error, in this order:

| state                                  | step                                   |
|----------------------------------------|----------------------------------------|
| files still included                   | drop all restored file contents        |
| more than one unit left                | drop the oldest quarter (at least one) |
| char cap above 625                     | halve the per-message char cap         |
| otherwise                              | exhausted (`context-exhausted`)        |

A step whose prompt is not strictly shorter than the last is exhausted too.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from cairn.actors.compactor.ledger import escape_headings
from cairn.actors.compactor.structured import FIELDS
from cairn.events.model import BlobPart, ImagePart, Message, text_of, units
from cairn.events.protocol import HEADINGS

#: the ledger contract a checkpoint was built under: this prompt and the host's rebuild (C8)
PROMPT_VERSION = "cairn-ledger-3"
#: the same contract asked for as a JSON object (`structured`): `raw_summary` is that JSON
JSON_PROMPT_VERSION = "cairn-ledger-json-1"
#: versions built before the spent rule (`ledger`): an auditor re-derives them without it
BEFORE_SPENT_RULE = frozenset({"cairn-ledger-1", "cairn-ledger-2"})
INITIAL_CHAR_CAP = 5000
MIN_CHAR_CAP = 625
TRANSCRIPT_HEADER = "Transcript to summarise:"
FILES_HEADER = "Recently accessed files (contents as last read):"


class PromptFile(msgspec.Struct, frozen=True):
    """A restored file as the prompt and the replacement show it."""

    path: str
    text: str
    more_lines: int = 0


class PromptShape(msgspec.Struct, frozen=True):
    """What the next summary prompt includes (the C6 state)."""

    include_files: bool = True
    first_unit: int = 0
    char_cap: int = INITIAL_CHAR_CAP


#: (beyond C7) a window this small or smaller gets the compact instructions (`compact_instructions`)
COMPACT_PROMPT_WINDOW = 8192


def compact_instructions(*, structured: bool = False) -> str:
    """C7's contract in about 170 tokens instead of 600, for a small window (`COMPACT_PROMPT_WINDOW`),
    where the full instructions would leave a 2,048-token window almost no room for the transcript."""
    if structured:
        form = (
            "Reply with one JSON object with exactly these fields, each a list of short lines: "
            f"{', '.join(FIELDS)}. An empty list where there is nothing to say."
        )
    else:
        form = (
            "First think briefly inside <analysis>...</analysis>, then write <summary>...</summary> "
            "with exactly these seven headings, each once, in this order, each on its own line "
            f"starting with '## ': {'; '.join(HEADINGS)}. Write 'no evidence observed' under a "
            "heading with nothing to report."
        )
    return (
        "Condense this coding agent's history so that it can carry on without it. "
        f"{form}\n"
        "Rules: keep observed facts apart from plans; copy commands, paths, identifiers and numbers "
        "exactly; never call unfinished work done or claim a check the transcript does not show; "
        "leave out secrets, hidden control messages and raw reasoning; the newest evidence wins. "
        "Lines 'EXACT CONTINUATION RECORD [heading] :: payload' are kept by the host: do not "
        "repeat them."
    )


def instructions(*, structured: bool = False) -> str:
    """The system message: how to write the summary (C7), in cairn's own words.

    `structured`: the same contract, asked for as one JSON object with a
    field per heading (`structured.FIELDS`), each a list of lines; the host
    writes the headings (beyond C7).

    Besides C7's contract it asks for what the quality bench's probes find a
    summary must carry and a careless one drops (`cairn bench --only quality`,
    issue 14): decisions with what was rejected and why, identifiers and
    numbers verbatim, the exact failing command and error, superseded facts
    marked as such, and the next action as an exact command. Offline these
    asks are unmeasured (the scripted provider ignores the prompt); run the
    bench with `--provider openai` to score them on a real model.
    """
    form = _answer_form(structured)
    return (
        "You are condensing the working history of a coding agent so that it can carry on "
        "after its earlier messages are removed. Only your summary will remain.\n\n"
        f"{form}"
        "Rules for the summary:\n"
        "- Keep what was observed (tool output, test results, file contents) apart from what "
        "was only intended or planned.\n"
        "- Copy exact commands, arguments, paths, identifiers and any constraint on the final "
        "response character for character.\n"
        "- Never call unfinished work done and never claim a check that the transcript does "
        "not show.\n"
        "- Leave out credentials and secrets, hidden control messages and raw reasoning.\n"
        "- When sources disagree, the newest evidence wins.\n"
        "- Where a section has nothing to report, write 'no evidence observed' instead of "
        "guessing.\n"
        "- Lines of the form 'EXACT CONTINUATION RECORD [heading] :: payload' are kept by "
        "the host verbatim; you need not repeat them. The host drops any line of yours that "
        "contains a record's payload, so to say that a record is done or replaced, describe "
        "it without quoting the payload. A record under Exact next action whose exact text a "
        "later successful tool call ran is shown by the host as done, and only the newest "
        "pending one stays the next action.\n"
        "- Lines marked [earlier] come from an older summary; fold their content in, but do "
        "not reuse them as headings.\n\n"
        "What the summary must not lose (each on its own line, so that it reads alone):\n"
        "- Every decision with what was chosen, what it was chosen over, and the reason, as "
        "in 'use X rather than Y because R', under Decisions and rationale.\n"
        "- Exact identifiers: every file path written or read that matters, and the names of "
        "functions, classes, constants and tests, copied verbatim.\n"
        "- Every measured or configured number with its label and unit, as written (for "
        "example 'p99 latency: 532.8 ms'); never round or convert.\n"
        "- Every failure: the exact command that failed, the exact error line it printed, and "
        "what fixed it (which function or file changed), or that it is still failing.\n"
        "- Superseded facts: when a value, plan, task or decision was replaced, state the "
        "current one, and mark the old one '(superseded)' on its line or leave it out; never "
        "state an old value as if it still held.\n"
        "- Under Exact next action: the pending command with all its arguments, copied "
        "character for character, only if it has not been run yet."
    )


def _answer_form(structured: bool) -> str:
    """How the answer is laid out: a JSON object of the seven fields, or the seven headings in text."""
    if structured:
        fields = "\n".join(f"- {name}: {heading}" for name, heading in zip(FIELDS, HEADINGS, strict=True))
        form = (
            "Answer with one JSON object and nothing else. It has exactly these seven fields, "
            "each a list of short lines (strings), one fact per line:\n"
            f"{fields}\n"
            "A field with nothing to report is an empty list.\n\n"
        )
    else:
        headings = "\n".join(f"{n}. {h}" for n, h in enumerate(HEADINGS, start=1))
        form = (
            "First think it through privately inside <analysis>...</analysis>. Then write the "
            "result inside <summary>...</summary>.\n\n"
            "Inside <summary>, use exactly these seven headings, in this order, each once, each "
            "on its own line starting with '## ':\n"
            f"{headings}\n\n"
        )
    return form


def render_message(index: int, message: Message, char_cap: int) -> str:
    """`[i] role: text`, the text being M4 text capped to `char_cap` chars."""
    text = text_of(message)
    if "\n" in text:  # only a continuation line can pass for a heading
        text = escape_headings(text)
    if message.tool_calls:
        calls = "; ".join(f"{c.name}({c.arguments})" for c in message.tool_calls)
        text = f"{text}\n(tool calls: {calls})" if text else f"(tool calls: {calls})"
    return f"[{index}] {message.role}: {cap_text(text, char_cap)}"


def cap_text(text: str, cap: int) -> str:
    """Keep at most `cap` chars of `text`: head 3/4, a marker, tail 1/4 (the marker extra)."""
    if len(text) <= cap:
        return text
    head = cap * 3 // 4
    tail = cap - head
    omitted = len(text) - head - tail
    return f"{text[:head]}\n[... {omitted} chars omitted ...]\n{text[len(text) - tail :]}"


def _fence(text: str) -> str:
    longest = 0
    run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    return "`" * max(3, longest + 1)


def render_files(files: Sequence[PromptFile]) -> str:
    blocks = [FILES_HEADER]
    for file in files:
        fence = _fence(file.text)
        more = f"\n({file.more_lines} more lines not shown)" if file.more_lines else ""
        blocks.append(f"### {file.path}\n{fence}\n{file.text}\n{fence}{more}")
    return "\n\n".join(blocks)


def build_prompt(
    source: Sequence[Message],
    files: Sequence[PromptFile],
    shape: PromptShape,
    *,
    structured: bool = False,
    compact: bool = False,
) -> tuple[Message, ...]:
    """The summary request's messages for `source` in the given shape (C7); `structured`: asking
    for the JSON ledger (`instructions`); `compact`: the short instructions of a small window."""
    spans = units(source)
    start = spans[shape.first_unit][0] if shape.first_unit < len(spans) else len(source)
    lines = [TRANSCRIPT_HEADER]
    if start:
        lines.append(f"({start} older messages are not shown.)")
    lines.extend(render_message(i, source[i], shape.char_cap) for i in range(start, len(source)))
    body = "\n".join(lines)
    if shape.include_files and files:
        body = f"{body}\n\n{render_files(files)}"
    if structured:
        body += "\n\nWrite the JSON object with the seven fields."
    else:
        body += "\n\nWrite the <analysis> and then the <summary> with the seven headings."
    return (
        Message(
            role="system",
            content=(compact_instructions if compact else instructions)(structured=structured),
            id="compaction-instructions",
        ),
        Message(role="user", content=body, id="compaction-transcript"),
    )


def prompt_chars(messages: Sequence[Message]) -> int:
    return sum(len(text_of(m)) for m in messages)


def next_shape(
    source: Sequence[Message], files: Sequence[PromptFile], shape: PromptShape
) -> tuple[PromptShape, str] | None:
    """C6: the next smaller shape and the name of its step, or None when exhausted."""
    if shape.include_files and files:
        return msgspec.structs.replace(shape, include_files=False), "dropped-files"
    left = len(units(source)) - shape.first_unit
    if left > 1:
        drop = max(1, left // 4)
        return msgspec.structs.replace(shape, first_unit=shape.first_unit + drop), f"dropped-units:{drop}"
    if shape.char_cap > MIN_CHAR_CAP:
        cap = max(MIN_CHAR_CAP, shape.char_cap // 2)
        return msgspec.structs.replace(shape, char_cap=cap), f"char-cap:{cap}"
    return None


def images_in(source: Sequence[Message]) -> int:
    """How many images the summary model was spared (C12)."""
    count = 0
    for message in source:
        if isinstance(message.content, str):
            continue
        for part in message.content:
            if isinstance(part, ImagePart) or (
                isinstance(part, BlobPart) and part.media_type.startswith("image/")
            ):
                count += 1
    return count
