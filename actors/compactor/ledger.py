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
- The spent rule (beyond C8; `settle_next_actions`, applied by
  `source_records` for both the summary and the fallback): a record under
  `Exact next action` is *spent* when, in the message it was last read from
  or a later one, a tool call whose result is `ok` has that payload (both
  stripped of surrounding whitespace) as its raw arguments or as a string
  value at any depth of its arguments decoded as JSON. A spent record is no
  longer a next action: it moves under `Verification evidence` (an observed
  tool outcome) as `- Ran as a successful tool call, no longer pending:
  <payload>`, and is carried in that form (`[Verification evidence] :: Ran
  as ...: <payload>`, read back as spent), so a later compaction whose source
  has lost the call still shows it as done. It is kept rather than dropped
  so that a resuming model does not run it again; it never says the command
  passed: the result's `ok` status is all the host knows of the outcome. Of
  the unspent next-action records only the newest stays; the older ones
  never ran and a newer plan replaced them, so they are dropped. A model line
  in the form of a next-action record is dropped by the rebuild (only the
  source writes records), so a summary cannot bring a replaced one back in
  the next compaction. Records under the other six headings are untouched.
- The rebuild is a pure function of (model text, records): an auditor gets
  the same ledger without calling a model.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence

import msgspec

from cairn.events.model import Message, ToolCall, text_of
from cairn.events.protocol import HEADINGS, RECORD_PREFIX

#: origins of the summary messages that carry records in `meta.record`
SUMMARY_ORIGINS = ("summary", "fallback-summary")
NO_EVIDENCE_LINE = "- No evidence observed."
MAX_RECORDS = 32
MAX_RECORD_PAYLOAD = 2048
MAX_RECORD_PAYLOAD_TOTAL = 16_384
#: the spent rule: the heading it applies to, where a spent record goes, and what its line says
NEXT_ACTION = "Exact next action"
SPENT_HEADING = "Verification evidence"
SPENT_NOTE = "Ran as a successful tool call, no longer pending: "

_RECORD_RE = re.compile(r"^\s*EXACT CONTINUATION RECORD \[([^\]\r\n]+)\] :: (.+)$")
_SUMMARY_RE = re.compile(r"<summary>(.*?)(?:</summary>|\Z)", re.DOTALL | re.IGNORECASE)
_ANALYSIS_RE = re.compile(r"<analysis>.*?(?:</analysis>|\Z)", re.DOTALL | re.IGNORECASE)
_HEADING_DECOR = re.compile(r"^[#*_\s]*(?:\d+\s*[.)]\s*)?[*_\s]*|[*_:\s]*$")
_NO_EVIDENCE_RE = re.compile(r"^[-*\s]*no evidence observed\.?\s*$", re.IGNORECASE)


def _squash(text: str) -> str:
    return "".join(text.split()).casefold()


_HEADING_KEYS: dict[str, str] = {_squash(h): h for h in HEADINGS}


class ExactRecord(msgspec.Struct, frozen=True):
    """One exact continuation record (C8): its canonical heading and verbatim payload.

    `spent`: a next action that ran as a successful tool call (the spent
    rule); its heading is then `SPENT_HEADING` and its text says it ran.
    """

    heading: str
    payload: str
    spent: bool = False

    def text(self) -> str:
        """What follows the record's `::`, and its ledger line's `- `."""
        return f"{SPENT_NOTE}{self.payload}" if self.spent else self.payload

    def line(self) -> str:
        """The canonical source form, as a later compaction reads it back."""
        return f"{RECORD_PREFIX} [{self.heading}] :: {self.text()}"


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
    """A record when `line` (one line, no line break) has the record form, else None.

    Under `SPENT_HEADING`, a payload that starts with `SPENT_NOTE` is a spent
    record's carried form: its payload is the rest (the limit applies to it).
    """
    match = _RECORD_RE.match(line)
    if match is None:
        return None
    heading = canonical_heading(match.group(1))
    payload = match.group(2)
    rest = payload[len(SPENT_NOTE) :]
    spent = heading == SPENT_HEADING and payload.startswith(SPENT_NOTE) and bool(rest.strip())
    if spent:
        payload = rest
    if heading is None or not payload.strip() or len(payload) > MAX_RECORD_PAYLOAD:
        return None
    return ExactRecord(heading, payload, spent)


def _records_in(text: str) -> Iterator[ExactRecord]:
    if RECORD_PREFIX not in text:
        return
    for line in text.splitlines():
        record = parse_record(line)
        if record is not None:
            yield record


def _newest_once(records: Iterable[ExactRecord]) -> list[ExactRecord]:
    """Each record once, at its newest place, oldest first."""
    unique: list[ExactRecord] = []
    seen: set[ExactRecord] = set()
    for record in reversed(list(records)):
        if record not in seen:
            seen.add(record)
            unique.append(record)
    unique.reverse()
    return unique


def extract_records(texts: Iterable[str]) -> RecordSet:
    """C8: every record in `texts` (oldest first), within the limits."""
    return _within_limits(_newest_once(record for text in texts for record in _records_in(text)))


def source_records(messages: Sequence[Message]) -> RecordSet:
    """C8 with the spent rule: the records of `messages` (full source), their next actions
    settled (`settle_next_actions`), within the limits."""
    found = _newest_once(record for text in record_texts(messages) for record in _records_in(text))
    return _within_limits(settle_next_actions(messages, found))


def _within_limits(unique: Sequence[ExactRecord]) -> RecordSet:
    """C8's limits over distinct records in source order; the newest win (C7)."""
    kept: list[ExactRecord] = []
    chars = 0
    for record in reversed(unique):  # newest first, so the newest win the limits
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
        yield from _texts_of(message)


def _texts_of(message: Message) -> Iterator[str]:
    if message.meta.record and message.meta.origin in SUMMARY_ORIGINS:
        yield message.meta.record
    yield text_of(message)


# -- the spent rule (beyond C8) -------------------------------------------------------------------


def spent_records(messages: Sequence[Message], records: Iterable[ExactRecord]) -> frozenset[ExactRecord]:
    """The next-action records of `records` that are spent in `messages` (the module doc).

    A record is placed at the last message it is read from; one that none of
    `messages` holds is never spent by a call.
    """
    places = _last_places(messages)
    ran = _ran_at(messages)
    return frozenset(
        record
        for record in records
        if record.heading == NEXT_ACTION
        and ran.get(record.payload.strip(), -1) >= places.get(record, len(messages))
    )


def settle_next_actions(messages: Sequence[Message], records: Sequence[ExactRecord]) -> list[ExactRecord]:
    """The spent rule over `records` of `messages` (source order): each spent next action moved
    under `SPENT_HEADING` as spent, the unspent ones but the newest dropped, the rest as they are."""
    spent = spent_records(messages, records)
    pending = [r for r in records if r.heading == NEXT_ACTION and r not in spent]
    newest = pending[-1] if pending else None
    settled: list[ExactRecord] = []
    for record in records:
        if record in spent:
            settled.append(ExactRecord(SPENT_HEADING, record.payload, spent=True))
        elif record.heading != NEXT_ACTION or record == newest:
            settled.append(record)
    return _newest_once(settled)  # a spent record may already have been carried as done


def _last_places(messages: Sequence[Message]) -> dict[ExactRecord, int]:
    """Each record of `messages` and the index of the last message it is read from."""
    places: dict[ExactRecord, int] = {}
    for index, message in enumerate(messages):
        for text in _texts_of(message):
            for record in _records_in(text):
                places[record] = index
    return places


def _ran_at(messages: Sequence[Message]) -> dict[str, int]:
    """Each text a successful tool call ran (stripped), and the index of the last message making
    such a call: its raw arguments, and every string inside them decoded as JSON."""
    ok = {m.tool_call_id for m in messages if m.role == "tool" and m.meta.tool_status == "ok"}
    ran: dict[str, int] = {}
    for index, message in enumerate(messages):
        for call in message.tool_calls:
            if call.id in ok:
                for text in _call_texts(call):
                    ran[text] = index
    return ran


def _call_texts(call: ToolCall) -> set[str]:
    """A call's raw arguments and the string values inside them (JSON, at any depth), stripped."""
    texts = {call.arguments.strip()}
    try:
        decoded = msgspec.json.decode(call.arguments)
    except msgspec.DecodeError:
        return texts
    stack: list[object] = [decoded]
    while stack:  # no recursion: arguments may nest deeper than the interpreter's stack
        value = stack.pop()
        if isinstance(value, str):
            texts.add(value.strip())
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return texts


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


def rebuild_ledger(model_summary: str, records: Sequence[ExactRecord], *, spent_rule: bool = True) -> str:
    """C8: the seven sections, the model's lines under their heading, records verbatim.

    `spent_rule`: drop the model's lines in the form of a next-action record
    too (False only to re-derive a checkpoint built before the rule).
    """
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
        if any(payload in line for payload in payloads) or (spent_rule and _is_next_action_record(line)):
            continue
        sections[current].append(line.rstrip())
    recorded: dict[str, list[str]] = {h: [] for h in HEADINGS}
    for record in records:
        recorded[record.heading].append(f"- {record.text()}")
    blocks: list[str] = []
    for heading in HEADINGS:
        own = sections[heading]
        if recorded[heading]:
            own = [line for line in own if not _NO_EVIDENCE_RE.match(line)]
        lines = own + recorded[heading]
        body = "\n".join(lines) if lines else NO_EVIDENCE_LINE
        blocks.append(f"## {heading}\n{body}")
    return "\n\n".join(blocks)


def _is_next_action_record(line: str) -> bool:
    """A model line a later compaction would read as a next-action record (the spent rule)."""
    record = parse_record(line) if RECORD_PREFIX in line else None
    return record is not None and record.heading == NEXT_ACTION


def escape_headings(text: str) -> str:
    """C7: mark lines of an earlier text that look like ledger headings, so a model
    reading them cannot take them for its own sections (no duplicate headings)."""
    if "\n" not in text and heading_of_line(text) is None:
        return text
    out: list[str] = []
    for line in text.splitlines():
        out.append(f"[earlier] {line.strip()}" if heading_of_line(line) is not None else line)
    return "\n".join(out)
