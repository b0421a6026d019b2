"""Beyond C7: whether a summary's own lines come from the transcript it summarizes (pure).

C7 checks a summary's shape: seven headings, or seven JSON fields. A small
model can meet the shape and say nothing: on the quality bench's sessions
SmolLM2-135M (llama.cpp, JSON ledger) wrote loops such as
`a2b2c2c2c2...`, one timestamp under every field, its field names echoed
back, or the items "1", "2", "3". Committed, such a summary would replace
the history with noise, where the deterministic fallback keeps the newest
units verbatim. So the host checks the grounding of the model's own lines
(headings, "no evidence observed" and the host's exact records aside):

- a *word* is a run of at least `MIN_WORD_CHARS` (4) letters, digits or
  underscores, lowercased; words of the summary prompt's own instructions,
  headings and field names do not count (echoing the prompt is not
  evidence);
- a line is *grounded* when one of its words occurs in the transcript;
- a summary passes when it has at least one line of its own, at least one
  in `GROUNDED_ONE_IN` (3) of its distinct lines is grounded, and, when it
  has `MIN_REPEATED_LINES` (4) lines or more, at most half of them repeat
  another (SmolLM2 once wrote the same two lines under all seven headings,
  one of them naming a word of the transcript: fourteen lines, two
  distinct; the failure reads "repetitive: ...").

A summary that fails is `malformed`, with a detail such as "ungrounded: 1
of 9 distinct lines share a word with the transcript", and the fallback
applies (C4 counts it). The bar is low on purpose: a real summary
paraphrases, but it names the paths, identifiers, commands and numbers it
carries; the failures above share no word with the transcript at all.
"""

from __future__ import annotations

import re
from collections.abc import Sequence, Set
from functools import cache

from cairn.actors.compactor.ledger import NO_EVIDENCE_LINE, heading_of_line, parse_record
from cairn.actors.compactor.prompt import (
    FILES_HEADER,
    TRANSCRIPT_HEADER,
    compact_instructions,
    instructions,
)
from cairn.actors.compactor.structured import FIELDS
from cairn.events.model import Message, text_of
from cairn.events.protocol import HEADINGS

#: the fewest characters a word has
MIN_WORD_CHARS = 4
#: at least one in this many of a summary's distinct own lines must share a word with the transcript
GROUNDED_ONE_IN = 3
#: a summary of at least this many own lines, more than half of them repeats, is refused
MIN_REPEATED_LINES = 4

_WORD = re.compile(rf"[a-z0-9_]{{{MIN_WORD_CHARS},}}")
_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s*")
_NO_EVIDENCE = NO_EVIDENCE_LINE[2:].rstrip(".").lower()


def words(text: str) -> set[str]:
    """The words of `text` (runs of at least four letters, digits or underscores, lowercased)."""
    return set(_WORD.findall(text.lower()))


@cache
def prompt_words() -> frozenset[str]:
    """The words the summary prompt itself gives the model: they ground nothing."""
    texts = [
        instructions(structured=False),
        instructions(structured=True),
        compact_instructions(structured=False),
        compact_instructions(structured=True),
        TRANSCRIPT_HEADER,
        FILES_HEADER,
        *HEADINGS,
        *FIELDS,
    ]
    return frozenset(w for text in texts for w in words(text))


def transcript_words(source: Sequence[Message]) -> frozenset[str]:
    """The words of the transcript the model was shown: message texts and tool-call arguments."""
    found: set[str] = set()
    for message in source:
        found |= words(text_of(message))
        for call in message.tool_calls:
            found |= words(f"{call.name} {call.arguments}")
    return frozenset(found - prompt_words())


def own_lines(body: str, *, distinct: bool = True) -> list[str]:
    """The model's own lines of a summary body (headings, blanks, "no evidence observed" and
    exact-record lines left out), bullets stripped, lowercased, in order; each once unless
    `distinct` is False."""
    seen: list[str] = []
    for line in body.splitlines():
        if heading_of_line(line) is not None or parse_record(line.lstrip("-* ")) is not None:
            continue
        text = _BULLET.sub("", line).strip()
        if not text or text.rstrip(".").lower() == _NO_EVIDENCE:
            continue
        seen.append(text.lower())
    return list(dict.fromkeys(seen)) if distinct else seen


def ungrounded(body: str, source_words: Set[str]) -> str | None:
    """Why the summary `body` is not grounded in a transcript with `source_words`, or None."""
    every = own_lines(body, distinct=False)
    lines = list(dict.fromkeys(every))
    if not lines:
        return "ungrounded: the summary has no line of its own, only headings and 'no evidence observed'"
    if len(every) >= MIN_REPEATED_LINES and len(lines) * 2 < len(every):
        return (
            f"repetitive: {len(every)} lines of its own, {len(lines)} distinct "
            "(more than half repeat another line)"
        )
    grounded = sum(1 for line in lines if not words(line).isdisjoint(source_words))
    if grounded * GROUNDED_ONE_IN >= len(lines):
        return None
    return (
        f"ungrounded: {grounded} of {len(lines)} distinct lines share a word with the transcript "
        f"(at least one in {GROUNDED_ONE_IN} must)"
    )
