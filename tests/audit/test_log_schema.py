"""The log as a reader of its own sees it (README, "The log"): `cairn schema`, and `crc` and `prev` from
their written definitions, checked on a store of every kind with code cairn does not use (the
`jsonschema` package, `hashlib`, and a CRC-32C written here from the polynomial)."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from cairn import cli
from cairn.events.kinds import KINDS
from cairn.events.line_schema import line_schema
from tests.audit.conftest import BROKEN


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        value = byte
        for _ in range(8):
            value = (value >> 1) ^ 0x82F63B78 if value & 1 else value >> 1
        table.append(value)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli, reflected), byte by byte."""
    value = 0xFFFFFFFF
    for byte in data:
        value = _TABLE[(value ^ byte) & 0xFF] ^ (value >> 8)
    return value ^ 0xFFFFFFFF


def lines_of(store: Path) -> Iterator[bytes]:
    """Every line of the log, split at the newline byte alone (as the README says to)."""
    for segment in sorted((store / "log").glob("*.jsonl")):
        data = segment.read_bytes()
        assert data.endswith(b"\n")
        yield from data[:-1].split(b"\n")


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return line_schema()


def test_every_line_of_a_store_of_every_kind_satisfies_cairn_schema(
    pristine: Path, capsys: pytest.CaptureFixture[str], schema: dict[str, Any]
) -> None:
    assert cli.main(["schema"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(json.dumps(schema))
    jsonschema.Draft202012Validator.check_schema(printed)
    validator = jsonschema.Draft202012Validator(printed)
    seen: set[str] = set()
    count = 0
    for line in lines_of(pristine):
        value = json.loads(line)
        problems = [error.message for error in validator.iter_errors(value)]
        assert not problems, (line[:160], problems[:3])
        assert value["event"]["kind"] == value["kind"]
        assert list(value) == printed["required"]  # the documented order
        seen.add(value["kind"])
        count += 1
    assert count > 2_000
    assert seen == set(KINDS) == set(printed["properties"]["kind"]["enum"])


def _set(path: str, value: object) -> Callable[[dict[str, Any]], None]:
    def change(line: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target = line
        for key in parents:
            target = target[key]
        target[last] = value

    return change


def _drop(path: str) -> Callable[[dict[str, Any]], None]:
    def change(line: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target = line
        for key in parents:
            target = target[key]
        del target[last]

    return change


OFF_FORMAT = [
    ("another-version", _set("v", 2)),
    ("unknown-kind", _set("kind", "usage-v2")),
    ("negative-pos", _set("pos", -1)),
    ("seq-zero", _set("seq", 0)),
    ("sid-with-dots", _set("sid", "a..b")),
    ("sid-with-slash", _set("sid", "a/b")),
    ("prev-uppercase", _set("prev", "9F" * 16)),
    ("prev-short", _set("prev", "9f" * 8)),
    ("crc-missing", _drop("crc")),
    ("crc-not-hex", _set("crc", "zzzzzzzz")),
    ("tokens-as-text", _set("event.prompt_tokens", "12")),
    ("request-id-missing", _drop("event.request_id")),
    ("event-of-no-kind", _set("event.kind", "nothing")),
]


@pytest.mark.parametrize("change", [c for _, c in OFF_FORMAT], ids=[n for n, _ in OFF_FORMAT])
def test_a_line_off_the_format_fails_the_schema(
    pristine: Path, schema: dict[str, Any], change: Callable[[dict[str, Any]], None]
) -> None:
    validator = jsonschema.Draft202012Validator(schema)
    usage = next(json.loads(x) for x in lines_of(pristine) if b'"kind":"usage"' in x)
    assert not list(validator.iter_errors(usage))
    bad = copy.deepcopy(usage)
    change(bad)
    assert list(validator.iter_errors(bad))


def test_the_readme_definitions_of_crc_and_prev_give_every_line_but_the_damaged_one(pristine: Path) -> None:
    """crc: CRC-32C of the bytes before the line's last `,"crc":`; prev: the first 32 hex digits of
    SHA-256 of the session's line before, without its crc field (those bytes and `}`), 32 zeros for
    seq 1. The fixture altered one line of session `broken` (same length): its crc, and the next
    line's prev, are the only ones that differ."""
    assert crc32c(b"123456789") == 0xE3069283  # the check value of CRC-32C
    digests: dict[str, str] = {}
    bad_crc: list[tuple[str, int]] = []
    bad_prev: list[tuple[str, int]] = []
    for line in lines_of(pristine):
        value = json.loads(line)
        sid, seq = value["sid"], value["seq"]
        cut = line.rindex(b',"crc":')
        if f"{crc32c(line[:cut]):08x}" != value["crc"]:
            bad_crc.append((sid, seq))
        if value["prev"] != digests.get(sid, "0" * 32):
            bad_prev.append((sid, seq))
        digests[sid] = hashlib.sha256(line[:cut] + b"}").hexdigest()[:32]
    assert bad_crc == [(BROKEN, 3)]
    assert bad_prev == [(BROKEN, 4)]


def test_the_readme_names_every_kind() -> None:
    """README's "Fields" item lists the kinds a reader meets; a kind added to cairn must be added there."""
    import re

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    item = readme[readme.index("- **Fields.** `cairn schema`") : readme.index("- **Large parts.**")]
    listed = item[item.index("every kind") : item.index("with its fields")]
    named = set(re.findall(r"`([a-z-]+)`", listed))
    assert named == set(KINDS)
