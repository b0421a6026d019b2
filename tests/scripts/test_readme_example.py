"""The README's scripted conversation with a tool call runs as printed, with only the public names."""

from __future__ import annotations

import ast
import contextlib
import io
import re
from pathlib import Path

import pytest

import cairn

README = Path(__file__).resolve().parents[2] / "README.md"
HEADING = "**A scripted conversation with a tool call**"


def _example() -> str:
    """The first python block after the heading, exactly as the README has it."""
    text = README.read_text()
    start = text.index(HEADING)
    block = re.compile(r"```python\n(.*?)```", re.S).search(text, start)
    assert block is not None, "no python block after the heading"
    return block.group(1)


def test_the_example_imports_only_public_names() -> None:
    tree = ast.parse(_example())
    imported = [
        alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names
    ]
    assert imported and set(imported) <= set(cairn.__all__)


def test_the_scripted_tool_conversation_runs_as_the_readme_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(_example(), str(README), "exec"), {"__name__": "readme_example"})
    lines = out.getvalue().splitlines()
    assert "notes.txt is about cairns." in lines
    shown = "\n".join(lines)
    assert "'kind': 'tool-result'" in shown and "notes.txt: 3 lines, all about cairns" in shown
    assert "'name': 'read_file'" in shown and "'workspace'" not in shown
    transcript = lines[lines.index("notes.txt is about cairns.") + 1 :]
    assert [line.split(" ", 2)[2].split("(")[0] for line in transcript] == [
        "ShownUserMessage",
        "ShownTurnStarted",
        "ShownAssistantMessage",
        "ShownToolResult",
        "ShownAssistantMessage",
        "ShownTurnCompleted",
    ]
    assert (tmp_path / "cairn-example").is_dir()
