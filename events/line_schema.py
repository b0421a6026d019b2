"""The JSON Schema of one log line, for readers of the log that do not use cairn's code (`cairn schema`).

Generated from the event classes themselves (`msgspec.json.schema`), so a
new kind or field is in it the moment it exists; the envelope's fields get
the bounds the writer enforces. What JSON Schema cannot say is in the
README's "The log": how `crc` and `prev` are computed, that seqs of a
session run 1, 2, 3, ... in the order of `pos`, and that `event.kind`
equals the envelope's `kind`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from cairn.events.codec import SCHEMA_VERSION, Record
from cairn.events.kinds import KINDS

#: the JSON Schema dialect of `line_schema`
DIALECT = "https://json-schema.org/draft/2020-12/schema"
_INT64_MAX = 2**63 - 1

#: the envelope, in the order a line writes it; `event` and `crc` come last
_ENVELOPE: dict[str, dict[str, Any]] = {
    "v": {"const": SCHEMA_VERSION, "description": "schema version"},
    "pos": {"type": "integer", "minimum": 0, "maximum": _INT64_MAX, "description": "global position"},
    "sid": {
        "type": "string",
        "pattern": "^[A-Za-z0-9][A-Za-z0-9._:@+=-]{0,127}$",
        "not": {"pattern": "[.][.]"},
        "description": "session id",
    },
    "seq": {"type": "integer", "minimum": 1, "maximum": _INT64_MAX, "description": "per-session seq"},
    "ts": {"type": "integer", "minimum": 0, "maximum": _INT64_MAX, "description": "unix milliseconds"},
    "prev": {
        "type": "string",
        "pattern": "^[0-9a-f]{32}$",
        "description": "chain digest of the session's line before (32 zeros before seq 1)",
    },
    "kind": {"enum": sorted(KINDS), "description": "the event's kind, equal to event.kind"},
}
_CRC = {"type": "string", "pattern": "^[0-9a-f]{8}$", "description": 'CRC-32C of the bytes before ,"crc":'}


def line_schema() -> dict[str, Any]:
    """A JSON Schema (draft 2020-12) that every line of a cairn log, parsed as JSON, satisfies.

    Fields an event leaves unset are absent from its line (the schema lists
    them as optional), and readers must accept fields they do not know: an
    event class may gain one with a default, and the schema allows more.
    """
    generated = msgspec.json.schema(Record)
    defs: dict[str, Any] = generated["$defs"]
    record = defs.pop("Record")
    properties = {**_ENVELOPE, "event": record["properties"]["event"], "crc": _CRC}
    return {
        "$schema": DIALECT,
        "title": f"cairn log line, schema version {SCHEMA_VERSION}",
        "description": (
            "One line of a cairn event log (log/*.jsonl), parsed as JSON. The line is the JSON "
            "text of these fields in this order, then a newline."
        ),
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "$defs": dict(sorted(defs.items())),
    }
