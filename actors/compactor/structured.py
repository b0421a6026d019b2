"""The ledger as a JSON object (beyond C7): a schema a small model can fill, rendered by the host.

A model asked for the seven headings in free text may misspell, reorder or
drop them (C7 refuses such a summary); SmolLM2-135M never wrote them at all.
Where the endpoint supports structured output, the summary request instead
asks for one JSON object with a field per heading, each a list of lines, and
the server constrains the reply to `ledger_schema` (vLLM's and llama.cpp's
`response_format` JSON schema, which OpenAI follows; a forced tool call on
Anthropic), its lines bounded for the reply's room (`bounds_for`).
The host writes the seven headings itself (`render_ledger`), in C7's order,
and from there the reply goes through C8's rebuild like a text reply: records
verbatim, the effect gate and the fallback unchanged.

`render_ledger` is a pure function of the raw reply, so an auditor re-derives
the same ledger from `raw_summary` without a model. A reply it cannot take
raises `LedgerJsonError` with the precise reason (not JSON, cut short by the
output limit, not an object, a field missing, a field that is not a list of
strings): a failed summary (`malformed`), never a crash.

Each item becomes one line `- <item>`: its line breaks are folded into
spaces, a bullet the model put in front is dropped, blank items are skipped,
an item repeated in its field is kept once (a small model repeats one line
until the item cap), and a field with no items says "no evidence observed"
(C8 writes the line).
Fields the schema does not name are refused by the schema where the server
enforces it, and ignored otherwise.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final, NamedTuple

from cairn.events.protocol import HEADINGS

#: the tool name (Anthropic) and schema name (OpenAI) of the ledger
LEDGER_NAME: Final = "ledger"
#: the most lines per field
MAX_ITEMS: Final = 12


def field_name(heading: str) -> str:
    """The JSON field of a C7 heading: `Open risks or blockers` -> `open_risks_or_blockers`."""
    return "_".join(heading.lower().split())


#: the seven fields, in C7's order
FIELDS: Final = tuple(field_name(h) for h in HEADINGS)
_HEADING_OF: Final = dict(zip(FIELDS, HEADINGS, strict=True))

#: the fewest lines per field, and the shortest and longest a line may be (chars)
MIN_ITEMS: Final = 2
MIN_ITEM_CHARS: Final = 16
MAX_ITEM_CHARS: Final = 400
#: the room one more line per field costs, in `bounds_for`
ROOM_PER_ITEM: Final = 700
#: tokens a line costs beyond its chars in the worst case (quotes, comma, indentation), and the
#: object's own (braces, the seven keys)
LINE_OVERHEAD: Final = 8
OBJECT_OVERHEAD: Final = 100


class LedgerBounds(NamedTuple):
    """How many lines a field may have and how long a line may be, for a reply of `room` tokens."""

    items: int
    chars: int


def bounds_for(room: int) -> LedgerBounds:
    """Bounds under which even a degenerate reply fits `room` tokens (at worst one token a char).

    A small model at temperature 0 may fill every line with a repeated pattern up to the limits
    (SmolLM2-135M wrote "1.1.1.1..." until the output ran out, and the JSON was cut); under these
    bounds, which llama.cpp's and vLLM's grammars enforce, its reply still ends as a whole object.
    One line a field more for every `ROOM_PER_ITEM` tokens (2..12), then the chars that leave the
    worst case within the room (16..400): 8,000 tokens give 11 lines of 94 chars, 682 (a
    2,048-token window) 2 lines of 33, 512 2 lines of 21.
    """
    items = max(MIN_ITEMS, min(MAX_ITEMS, room // ROOM_PER_ITEM))
    chars = (room - OBJECT_OVERHEAD) // (len(FIELDS) * items) - LINE_OVERHEAD
    return LedgerBounds(items, max(MIN_ITEM_CHARS, min(MAX_ITEM_CHARS, chars)))


def ledger_schema(bounds: LedgerBounds | None = None) -> dict[str, Any]:
    """The JSON schema of the ledger: the seven fields, each a list of strings, within `bounds`
    (none: unbounded lists of strings)."""
    line: dict[str, Any] = {"type": "string"}
    field: dict[str, Any] = {"type": "array", "items": line}
    if bounds is not None:
        line["maxLength"] = bounds.chars
        field["maxItems"] = bounds.items
    return {
        "type": "object",
        "properties": {name: field for name in FIELDS},
        "required": list(FIELDS),
        "additionalProperties": False,
    }


def schema_json(bounds: LedgerBounds | None = None) -> str:
    """`ledger_schema` as a request carries it (canonical JSON: sorted keys, no spaces)."""
    return json.dumps(ledger_schema(bounds), sort_keys=True, separators=(",", ":"))


LEDGER_SCHEMA: Final[dict[str, Any]] = ledger_schema()

_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s+")


class LedgerJsonError(ValueError):
    """A structured reply the host cannot render, with the precise reason."""


def render_ledger(raw: str, *, finish_reason: str | None = None) -> str:
    """The seven headed sections of a JSON ledger reply, in C7's order, for C8's rebuild.

    Raises `LedgerJsonError`. `finish_reason` (the server's) only sharpens the
    reason: JSON cut by a `length` finish says so.
    """
    text = raw.strip()
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        if finish_reason == "length":
            raise LedgerJsonError(
                f"the JSON ledger ({len(raw)} chars) was cut short by the output limit (finish 'length')"
            ) from None
        raise LedgerJsonError(
            f"the reply ({len(raw)} chars) is not JSON: {error.msg} at char {error.pos}"
        ) from None
    if not isinstance(value, dict):
        raise LedgerJsonError(
            f"the JSON ledger is a {_json_type(value)}, not an object with the seven fields"
        )
    missing = [name for name in FIELDS if name not in value]
    if missing:
        raise LedgerJsonError(
            f"the JSON ledger lacks {len(missing)} of the seven fields: {', '.join(missing)}"
        )
    blocks: list[str] = []
    for name in FIELDS:
        items = value[name]
        if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
            raise LedgerJsonError(
                f"the JSON ledger's field {name} is a {_json_type(items)}, not a list of strings"
            )
        lines = list(dict.fromkeys(line for line in (_line(item) for item in items) if line))
        blocks.append("\n".join([f"## {_HEADING_OF[name]}", *lines]))
    return "\n\n".join(blocks)


def _line(item: str) -> str:
    """One item as one ledger line (`- ...`), or "" for a blank one."""
    folded = " ".join(item.split())
    folded = _BULLET.sub("", folded, count=1).strip()
    return f"- {folded}" if folded else ""


def _json_type(value: object) -> str:
    if isinstance(value, list):
        kinds = sorted({_json_type(v) for v in value})
        return f"list of {'/'.join(kinds)}" if kinds else "list"
    return {
        dict: "object",
        str: "string",
        bool: "boolean",
        int: "number",
        float: "number",
        type(None): "null",
    }.get(type(value), type(value).__name__)
