"""The demo's workspace tools: read, write, list, grep, never outside the workspace."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from actors.tools import ToolInvocation, WorkspaceTools
from events.kinds import FileAccess
from events.model import ToolCall


def _call(workspace: Path, name: str, arguments: str) -> ToolInvocation:
    call = ToolCall("c", name, arguments)
    return ToolInvocation(session="s", workspace=str(workspace), turn_id="t1", call=call)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("def main():\n    return 42\n")
    (root / "README").write_text("hello\n")
    (tmp_path / "secret.txt").write_text("top secret\n")
    return root


def test_read_write_list_grep_inside_the_workspace(workspace: Path) -> None:
    tools = WorkspaceTools()
    read = tools(_call(workspace, "read", '{"path": "src/app.py"}'))
    assert read.status == "ok" and "return 42" in str(read.content)
    assert read.effect == "read" and read.files == (FileAccess("src/app.py", "read"),)
    wrote = tools(_call(workspace, "write", '{"path": "notes/n.md", "content": "done"}'))
    assert wrote.status == "ok" and wrote.effect == "write"
    assert (workspace / "notes" / "n.md").read_text() == "done"
    listed = tools(_call(workspace, "list", "{}"))
    assert listed.content == "README\nnotes/\nsrc/"
    found = tools(_call(workspace, "grep", '{"pattern": "return \\\\d+"}'))
    assert found.content == "src/app.py:2:    return 42"


@pytest.mark.parametrize(
    "name, arguments",
    [
        ("read", '{"path": "../secret.txt"}'),
        ("read", '{"path": "/etc/passwd"}'),
        ("write", '{"path": "../escape.txt", "content": "x"}'),
        ("list", '{"path": ".."}'),
        ("read", '{"path": "link"}'),
        ("read", "not json"),
        ("delete", '{"path": "README"}'),
    ],
)
def test_every_way_out_of_the_workspace_is_refused(workspace: Path, name: str, arguments: str) -> None:
    os.symlink(workspace.parent / "secret.txt", workspace / "link")
    outcome = WorkspaceTools()(_call(workspace, name, arguments))
    assert outcome.status == "error"
    assert "top secret" not in str(outcome.content)
    assert not (workspace.parent / "escape.txt").exists()


def test_grep_does_not_follow_a_symlink_out(workspace: Path) -> None:
    os.symlink(workspace.parent / "secret.txt", workspace / "link")
    outcome = WorkspaceTools()(_call(workspace, "grep", '{"pattern": "secret"}'))
    assert outcome.content == "no matches"
