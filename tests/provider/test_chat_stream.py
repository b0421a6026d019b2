"""Chunks into provider output: tool-call assembly, reasoning, usage, finish, malformed chunks."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cairn.actors.provider.base import (
    Finished,
    ProviderOutput,
    ReasoningDelta,
    TextDelta,
    ToolCallReady,
    UsageReport,
)
from cairn.actors.provider.chat_stream import ChunkAssembler, MalformedChunk, TruncatedStream, usage_report
from cairn.events.model import ToolCall
from tests.provider.chat_server import call_more, call_start, chunk, usage_chunk


def run(*chunks: Any) -> list[ProviderOutput]:
    assembler = ChunkAssembler(lambda position: f"made-{position}")
    out: list[ProviderOutput] = []
    for item in chunks:
        out.extend(assembler.feed(item))
    return out + assembler.end()


def calls(outputs: list[ProviderOutput]) -> list[ToolCall]:
    return [item.call for item in outputs if isinstance(item, ToolCallReady)]


@st.composite
def split(draw: st.DrawFn, text: str) -> list[str]:
    cuts = sorted(draw(st.sets(st.integers(min_value=1, max_value=max(1, len(text) - 1)), max_size=6)))
    bounds = [0, *[c for c in cuts if c < len(text)], len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds) if b > a]


arguments = st.dictionaries(
    st.text("abcdef", min_size=1, max_size=5), st.integers() | st.text(max_size=8), max_size=4
).map(json.dumps)


@given(st.data(), st.lists(arguments, min_size=1, max_size=3))
def test_arguments_split_anywhere_assemble_to_the_same_calls(data: st.DataObject, args: list[str]) -> None:
    chunks = []
    for index, text in enumerate(args):
        pieces = data.draw(split(text))
        chunks.append(chunk(tool_calls=[call_start(index, f"call_{index}", f"tool_{index}", pieces[0])]))
        chunks.extend(chunk(tool_calls=[call_more(index, piece)]) for piece in pieces[1:])
    chunks.append(chunk(finish="tool_calls"))
    assert calls(run(*chunks)) == [ToolCall(f"call_{i}", f"tool_{i}", text) for i, text in enumerate(args)]


def test_calls_are_released_at_the_finish_reason_before_usage_and_finish() -> None:
    assembler = ChunkAssembler(str)
    assert assembler.feed(chunk(tool_calls=[call_start(0, "c1", "ls", "{}")])) == []
    released = assembler.feed(chunk(finish="tool_calls"))
    assert released == [ToolCallReady(ToolCall("c1", "ls", "{}"))]
    assert assembler.feed(usage_chunk(5, 1, 6)) == []
    assert assembler.end() == [UsageReport(5, 1, 6), Finished("tool_calls")]


def test_a_reused_index_with_a_new_id_starts_a_new_call() -> None:
    out = run(
        chunk(tool_calls=[call_start(0, "c1", "read", '{"a": 1}')]),
        chunk(tool_calls=[call_start(0, "c2", "grep", '{"b": 2}')]),
        chunk(finish="tool_calls"),
    )
    assert calls(out) == [ToolCall("c1", "read", '{"a": 1}'), ToolCall("c2", "grep", '{"b": 2}')]


def test_fragments_without_index_and_calls_without_id() -> None:
    out = run(
        chunk(tool_calls=[{"function": {"name": "read", "arguments": '{"pa'}}]),
        chunk(tool_calls=[{"function": {"arguments": 'th": 1}'}}]),
        chunk(tool_calls=[{"id": "c9", "function": {"name": "ls"}}]),
        chunk(finish="stop"),
    )
    assert calls(out) == [ToolCall("made-0", "read", '{"path": 1}'), ToolCall("c9", "ls", "{}")]


def test_reasoning_is_taken_once_when_a_server_sends_both_keys() -> None:
    both = chunk(reasoning="think")
    both["choices"][0]["delta"]["reasoning"] = "think"
    assert run(both, chunk(content="say", finish="stop"))[:2] == [ReasoningDelta("think"), TextDelta("say")]


def test_other_choices_and_fragments_after_the_finish_are_ignored() -> None:
    other = chunk(content="second choice")
    other["choices"][0]["index"] = 1
    late = chunk(tool_calls=[call_start(1, "late", "ls")])
    out = run(chunk(content="a", finish="stop"), other, late)
    assert out == [TextDelta("a"), UsageReport(), Finished("stop")]


def test_the_end_without_a_finish_reason_is_a_truncated_stream() -> None:
    assembler = ChunkAssembler(str)
    assembler.feed(chunk(content="half"))
    with pytest.raises(TruncatedStream):
        assembler.end()


@pytest.mark.parametrize(
    "bad",
    [
        7,
        ["list"],
        {"choices": {"index": 0}},
        {"choices": ["x"]},
        {"choices": [{"index": 0, "delta": "text"}]},
        {"choices": [{"index": 0, "delta": {"content": 5}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": {"index": 0}}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": "0"}]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": 3}]},
    ],
)
def test_malformed_chunks_are_refused(bad: object) -> None:
    with pytest.raises(MalformedChunk):
        ChunkAssembler(str).feed(bad)


def test_a_call_without_a_name_is_malformed_at_the_finish() -> None:
    assembler = ChunkAssembler(str)
    assembler.feed(chunk(tool_calls=[{"index": 0, "id": "c1", "function": {"arguments": "{}"}}]))
    with pytest.raises(MalformedChunk, match="no function name"):
        assembler.feed(chunk(finish="tool_calls"))


@pytest.mark.parametrize(
    ("usage", "report"),
    [
        (None, UsageReport()),
        ({"prompt_tokens": 3}, UsageReport(prompt_tokens=3)),
        ({"prompt_tokens": True, "completion_tokens": -1, "total_tokens": 2.5}, UsageReport()),
        (
            {
                "prompt_tokens": 9,
                "completion_tokens": 1,
                "total_tokens": 10,
                "prompt_tokens_details": {"cached_tokens": 8},
            },
            UsageReport(9, 1, 10, 8),
        ),
        ({"prompt_tokens_details": None}, UsageReport()),
    ],
)
def test_P1_only_non_negative_integer_usage_fields_pass(usage: object, report: UsageReport) -> None:
    assert usage_report(usage) == report
