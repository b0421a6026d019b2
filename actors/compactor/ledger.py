"""The continuation ledger (C7, C8): its seven headings, exact records, and the host-side rebuild.

Rules of this file:

- The ledger has exactly the seven `HEADINGS`, in that order, once each,
  rendered as `## <heading>` lines with a blank line between sections.
- A source line `EXACT CONTINUATION RECORD [<heading>] :: <payload>` is a
  record when its heading is one of the seven (case and whitespace ignored)
  and its payload is 1..2,048 chars on one line. At most 32 records and
  16,384 payload chars are kept; a duplicate (same heading, same payload)
  counts once. When there are more, the newest win (C7: prefer the newest
  evidence); the kept ones stay in source order.
- A model's summary is usable only when it names all seven headings
  (`missing_headings`); order and repeats are repaired by the rebuild. One
  that lacks any is a failed summary (`malformed`), never a ledger of
  "No evidence observed." sections.
- The rebuild keeps the model's lines under the heading they were under,
  drops every model line that contains a record payload (the model never
  rewrites a record), then appends each record verbatim as `- <payload>`
  under its own heading. A section left empty says `- No evidence observed.`
- The records of an earlier checkpoint travel in its summary message's
  `meta.record` (canonical record lines, never sent to a model), so a later
  compaction reads them from its source like any other record.
- The rebuild is a pure function of (model text, records): an auditor gets
  the same ledger without calling a model.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence

import msgspec

from cairn.events.model import Message, text_of
from cairn.events.protocol import HEADINGS, RECORD_PREFIX

#: origins of the summary messages that carry records in `meta.record`
SUMMARY_ORIGINS = ("summary", "fallback-summary")
NO_EVIDENCE_LINE = "- No evidence observed."
MAX_RECORDS = 32
MAX_RECORD_PAYLOAD = 2048
MAX_RECORD_PAYLOAD_TOTAL = 16_384

_RECORD_RE = re.compile(r"^\s*EXACT CONTINUATION RECORD \[([^\]\r\n]+)\] :: (.+)$")
_SUMMARY_RE = re.compile(r"<summary>(.*?)(?:</summary>|\Z)", re.DOTALL | re.IGNORECASE)
_ANALYSIS_RE = re.compile(r"<analysis>.*?(?:</analysis>|\Z)", re.DOTALL | re.IGNORECASE)
_HEADING_DECOR = re.compile(r"^[#*_\s]*(?:\d+\s*[.)]\s*)?[*_\s]*|[*_:\s]*$")
_NO_EVIDENCE_RE = re.compile(r"^[-*\s]*no evidence observed\.?\s*$", re.IGNORECASE)


def _squash(text: str) -> str:
    return "".join(text.split()).casefold()


_HEADING_KEYS: dict[str, str] = {_squash(h): h for h in HEADINGS}


class ExactRecord(msgspec.Struct, frozen=True):
    """One exact continuation record (C8): its canonical heading and verbatim payload."""

    heading: str
    payload: str

    def line(self) -> str:
        """The canonical source form, as a later compaction reads it back."""
        return f"{RECORD_PREFIX} [{self.heading}] :: {self.payload}"


class RecordSet(msgspec.Struct, frozen=True):
    """The records kept for one compaction and how many were left out by the limits."""

    records: tuple[ExactRecord, ...] = ()
    omitted: int = 0


def canonical_heading(text: str) -> str | None:
    """The heading `text` names, ignoring case and whitespace, or None."""
    return _HEADING_KEYS.get(_squash(text))


def heading_of_line(line: str) -> str | None:
    """The heading a summary line stands for (`## 3. Workspace mutations:` too), or None."""
    stripped = line.strip()
    if not stripped or len(stripped) > 80:
        return None
    return canonical_heading(_HEADING_DECOR.sub("", stripped))


def parse_record(line: str) -> ExactRecord | None:
    """A record when `line` (one line, no line break) has the record form, else None."""
    match = _RECORD_RE.match(line)
    if match is None:
        return None
    heading = canonical_heading(match.group(1))
    payload = match.group(2)
    if heading is None or not payload.strip() or len(payload) > MAX_RECORD_PAYLOAD:
        return None
    return ExactRecord(heading, payload)


def extract_records(texts: Iterable[str]) -> RecordSet:
    """C8: every record in `texts` (oldest first), within the limits."""
    found: list[ExactRecord] = []
    for text in texts:
        if RECORD_PREFIX not in text:
            continue
        for line in text.splitlines():
            record = parse_record(line)
            if record is not None:
                found.append(record)
    unique: list[ExactRecord] = []
    seen: set[ExactRecord] = set()
    for record in reversed(found):  # newest first, so the newest win the limits
        if record not in seen:
            seen.add(record)
            unique.append(record)
    kept: list[ExactRecord] = []
    chars = 0
    for record in unique:
        if len(kept) >= MAX_RECORDS or chars + len(record.payload) > MAX_RECORD_PAYLOAD_TOTAL:
            continue
        kept.append(record)
        chars += len(record.payload)
    kept.reverse()
    return RecordSet(tuple(kept), len(unique) - len(kept))


def record_lines(records: Sequence[ExactRecord]) -> str:
    """Records in canonical line form, one a line (a summary message's `meta.record`)."""
    return "\n".join(record.line() for record in records)


def record_texts(messages: Iterable[Message]) -> Iterator[str]:
    """The texts records are read from (C8): each message's M4 text, and the records an
    earlier checkpoint's summary kept in its `meta.record`, at that message's place."""
    for message in messages:
        if message.meta.record and message.meta.origin in SUMMARY_ORIGINS:
            yield message.meta.record
        yield text_of(message)


def summary_body(raw: str) -> str:
    """The part of a model reply that is the summary: the `<summary>` block, else the
    text without its `<analysis>` block. Blank means the reply is empty (C5)."""
    match = _SUMMARY_RE.search(raw)
    if match is not None:
        return match.group(1).strip()
    return _ANALYSIS_RE.sub("", raw).strip()


def missing_headings(summary: str) -> tuple[str, ...]:
    """C7: the ledger headings (in their order) that no line of `summary` stands for.

    A summary the host can take must name all seven. Their order and a
    repeat do not matter here: the rebuild (C8) puts the sections in order and
    merges a repeated one, losing no line. A missing heading cannot be
    repaired: the host would have to write "No evidence observed." for the
    model, or file the model's lines under a heading it did not choose.
    """
    present = {heading_of_line(line) for line in summary.splitlines()}
    return tuple(heading for heading in HEADINGS if heading not in present)


def rebuild_ledger(model_summary: str, records: Sequence[ExactRecord]) -> str:
    """C8: the seven sections, the model's lines under their heading, records verbatim."""
    sections: dict[str, list[str]] = {h: [] for h in HEADINGS}
    current: str | None = None
    payloads = [r.payload for r in records]
    for line in model_summary.splitlines():
        heading = heading_of_line(line)
        if heading is not None:
            current = heading
            continue
        if current is None or not line.strip():
            continue
        if any(payload in line for payload in payloads):
            continue
        sections[current].append(line.rstrip())
    recorded: dict[str, list[str]] = {h: [] for h in HEADINGS}
    for record in records:
        recorded[record.heading].append(f"- {record.payload}")
    blocks: list[str] = []
    for heading in HEADINGS:
        own = sections[heading]
        if recorded[heading]:
            own = [line for line in own if not _NO_EVIDENCE_RE.match(line)]
        lines = own + recorded[heading]
        body = "\n".join(lines) if lines else NO_EVIDENCE_LINE
        blocks.append(f"## {heading}\n{body}")
    return "\n\n".join(blocks)


def escape_headings(text: str) -> str:
    """C7: mark lines of an earlier text that look like ledger headings, so a model
    reading them cannot take them for its own sections (no duplicate headings)."""
    if "\n" not in text and heading_of_line(text) is None:
        return text
    out: list[str] = []
    for line in text.splitlines():
        out.append(f"[earlier] {line.strip()}" if heading_of_line(line) is not None else line)
    return "\n".join(out)
