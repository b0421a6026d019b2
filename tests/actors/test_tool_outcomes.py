"""Whatever a host's tool executor returns or raises, the model sees an error result and the turn goes on.

Each case runs a real host on the scripted provider: the model calls one
tool, the host's executor misbehaves, the model answers. The turn must
complete, the log must hold a readable `tool-result` with status `error`
that names what was wrong, and a fresh host must replay the same state.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from cairn.actors.provider.scripted import Reply
from cairn.actors.session import preparing as session_preparing
from cairn.actors.tools import ToolInvocation, ToolOutcome
from cairn.events.kinds import FileAccess, ToolResult
from cairn.events.model import BlobPart, ImagePart, Part, TextPart, ToolCall
from tests.actors.helpers import WAIT, open_host, reopen_and_compare, scripted


class CustomAbort(BaseException):
    """A BaseException a host's code might raise (not an Exception)."""


class Misbehaving:
    """A tool executor that returns (or raises) `value` for every call."""

    schemas = ('{"name":"read","parameters":{"type":"object"}}',)
    read_only = ("read",)

    def __init__(self, value: object) -> None:
        self.value = value

    def __call__(self, invocation: ToolInvocation) -> Any:
        if isinstance(self.value, BaseException):
            raise self.value
        return self.value


def _one_tool_call_then_reply() -> Any:
    return scripted(Reply(text="", tool_calls=(ToolCall("c1", "read", "{}"),)), Reply(text="noted"))


def _text(content: str | tuple[Part, ...]) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.text for part in content if isinstance(part, TextPart))


def _tool_result(host: Any, sid: str) -> ToolResult:
    results = [r.event for r in host.journal.read(sid, 1) if isinstance(r.event, ToolResult)]
    assert len(results) == 1
    return results[0]


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no message")


BAD_VALUES: list[tuple[str, object, str]] = [
    ("int-content", ToolOutcome(content=12345), "got `int` - at `$.content`"),  # type: ignore[arg-type]
    ("unknown-status", ToolOutcome(content="x", status="weird"), "`$.status`"),  # type: ignore[arg-type]
    ("unknown-effect", ToolOutcome(content="x", effect="delete"), "`$.effect`"),  # type: ignore[arg-type]
    ("files-not-file-access", ToolOutcome(content="x", files=("a.py",)), "`$.files[0]`"),  # type: ignore[arg-type]
    ("file-path-int", ToolOutcome(content="x", files=(FileAccess(3, "read"),)), "`$.files[0].path`"),  # type: ignore[arg-type]
    ("parts-not-parts", ToolOutcome(content=(1, 2)), "`$.content[0]`"),  # type: ignore[arg-type]
    ("text-part-int", ToolOutcome(content=(TextPart(5),)), "`$.content[0].text`"),  # type: ignore[arg-type]
    ("blob-part", ToolOutcome(content=(BlobPart("ab" * 32, 1),)), "a BlobPart"),
    ("image-not-image", ToolOutcome(content=(ImagePart("text/html", "PGI+"),)), "image part 0"),
    ("lone-surrogate", ToolOutcome(content="bad \ud800 text"), "lone surrogate"),
    ("unencodable", ToolOutcome(content=object()), "cannot be recorded"),  # type: ignore[arg-type]
    ("a-string", "just text", "returned str, not a ToolOutcome"),
    ("none", None, "returned NoneType, not a ToolOutcome"),
    ("a-dict", {"content": "x"}, "returned dict, not a ToolOutcome"),
    ("raises", ValueError("disk on fire"), "ValueError: disk on fire"),
    ("raises-unprintable", _Unprintable(), "_Unprintable"),
    ("keyboard-interrupt", KeyboardInterrupt(), "KeyboardInterrupt"),
    ("system-exit", SystemExit(3), "SystemExit: 3"),
    ("custom-base-exception", CustomAbort("stop"), "CustomAbort: stop"),
]


@pytest.mark.parametrize(
    "value, named", [(v, n) for _, v, n in BAD_VALUES], ids=[i for i, _, _ in BAD_VALUES]
)
def test_a_bad_tool_outcome_is_an_error_result_and_the_turn_goes_on(
    tmp_path: Path, value: object, named: str
) -> None:
    provider = _one_tool_call_then_reply()
    host = open_host(tmp_path / "store", provider, tools=Misbehaving(value))
    try:
        result = host.send("s1", "go", workspace=str(tmp_path)).result(timeout=WAIT)
        assert (result.status, result.phase) == ("completed", None), result
        tool = _tool_result(host, "s1")  # the log reads back: nothing malformed was written
        assert tool.status == "error" and tool.effect == "read"
        assert named in _text(tool.content)
        sent = provider.requests[-1].messages[-1]  # what the model saw of it
        assert sent.role == "tool" and named in _text(sent.content)
        # the actor survived: it takes the next message without a rebuild
        assert host.send("s1", "again").result(timeout=WAIT).status == "completed"
        assert host.stats.rebuilt_after_crash == 0
    finally:
        host = reopen_and_compare(host, tmp_path / "store", ["s1"])
        host.close()


def test_a_tool_result_too_large_for_a_log_line_is_an_error_result(tmp_path: Path) -> None:
    # 250,000 small parts: no part goes to the blob store, the line would be ~25 MB (limit 20 MiB);
    # kept whole (max_tool_output_chars None), as the default would cut it to 1,000,000 chars
    many = tuple(TextPart(f"part {index:07d} " + "x" * 80) for index in range(250_000))
    host = open_host(
        tmp_path / "store",
        _one_tool_call_then_reply(),
        tools=Misbehaving(ToolOutcome(content=many)),
        max_tool_output_chars=None,
    )
    try:
        result = host.send("s1", "go", workspace=str(tmp_path)).result(timeout=WAIT)
        assert result.status == "completed", result
        tool = _tool_result(host, "s1")
        assert tool.status == "error" and "the log cannot hold" in _text(tool.content)
    finally:
        host.close()


def test_a_crashed_session_is_named_by_its_id_in_the_log_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def bug(*args: object, **kwargs: object) -> None:
        raise RuntimeError("an injected bug")

    monkeypatch.setattr(session_preparing, "plan_micro", bug)  # a bug in the turn loop itself
    with (
        caplog.at_level(logging.ERROR, logger="cairn.session"),
        open_host(tmp_path / "store", scripted()) as host,
    ):
        result = host.send("sess-42", "go", workspace=str(tmp_path)).result(timeout=WAIT)
    assert result.phase == "interrupted"
    lines = [r.getMessage() for r in caplog.records if r.name == "cairn.session"]
    assert any("'sess-42'" in line and "RuntimeError: an injected bug" in line for line in lines), lines
