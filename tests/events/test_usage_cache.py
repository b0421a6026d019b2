"""The `usage` event's cache figures: reads in `cached_prompt_tokens`, writes in `cache_write_tokens`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from msgspec import UNSET

from cairn.events.body_check import checked_body
from cairn.events.codec import GENESIS, decode_line, encode_line
from cairn.events.errors import InvalidEvent
from cairn.events.kinds import Usage

GOLDEN = Path(__file__).parents[1] / "fixtures" / "golden.jsonl"


def test_the_golden_usage_line_decodes_without_cache_writes() -> None:
    [line] = [line for line in GOLDEN.read_bytes().splitlines(keepends=True) if b'"kind":"usage"' in line]
    event = decode_line(line).event
    assert isinstance(event, Usage)
    assert event.cached_prompt_tokens == 1_000 and event.cache_write_tokens is UNSET


def test_a_usage_without_cache_writes_encodes_as_before() -> None:
    event = Usage(request_id="r1", prompt_tokens=1_200, completion_tokens=40, total_tokens=1_240)
    assert checked_body(event)[1] == (
        b'{"kind":"usage","request_id":"r1","prompt_tokens":1200,"completion_tokens":40,'
        b'"total_tokens":1240,"cached_prompt_tokens":null}'
    )


def test_cache_writes_read_back_equal_and_jq_sees_a_plain_integer() -> None:
    event = Usage(
        request_id="r1",
        prompt_tokens=7_100,
        completion_tokens=50,
        total_tokens=7_150,
        cached_prompt_tokens=5_000,
        cache_write_tokens=2_000,
    )
    line, _ = encode_line(pos=0, sid="s1", seq=1, ts=1, prev=GENESIS, event=event)
    body = json.loads(line)["event"]
    assert (body["cached_prompt_tokens"], body["cache_write_tokens"]) == (5_000, 2_000)
    assert decode_line(line).event == event


@pytest.mark.parametrize(
    ("writes", "why"),
    [(None, "got `null` - at `$.cache_write_tokens`"), ("many", "got `str` - at `$.cache_write_tokens`")],
)
def test_a_bad_cache_write_figure_is_refused_before_it_is_written(writes: object, why: str) -> None:
    with pytest.raises(InvalidEvent, match=re.escape(why)):
        checked_body(Usage(request_id="r1", cache_write_tokens=writes))  # type: ignore[arg-type]
