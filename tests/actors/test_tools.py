"""The demo's workspace tools: read, write, list, grep, never outside the workspace."""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from cairn.actors.tools import ToolInvocation, ToolOutcome, WorkspaceTools
from cairn.events.kinds import FileAccess
from cairn.events.model import ToolCall


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


# --- hostile patterns, files and races ---------------------------------------------------------


def test_grep_with_a_catastrophic_pattern_ends_and_never_freezes_other_threads(workspace: Path) -> None:
    # `(a+)+$` over 25 a's and a b: Python's re backtracks ~2^25 times holding the GIL (seconds,
    # doubling per char); a thread counting meanwhile must never be held up for long
    (workspace / "evil.txt").write_text("a" * 25 + "b\n")
    running, stop = threading.Event(), threading.Event()
    longest_gap = [0.0]
    iterations = [0]

    def count() -> None:
        last = time.monotonic()
        running.set()
        while not stop.is_set():
            now = time.monotonic()
            longest_gap[0] = max(longest_gap[0], now - last)
            last = now
            iterations[0] += 1

    counter = threading.Thread(target=count)
    counter.start()
    running.wait()
    try:
        outcome = WorkspaceTools()(_call(workspace, "grep", '{"pattern": "(a+)+$", "path": "evil.txt"}'))
    finally:
        stop.set()
        counter.join()
    assert outcome.content == "no matches"
    assert iterations[0] > 0
    assert longest_gap[0] < 1.0, f"another thread was held up for {longest_gap[0]:.1f} s"


def test_grep_stops_at_its_deadline_with_an_error_the_model_sees(workspace: Path) -> None:
    for index in range(5):
        (workspace / f"f{index}.txt").write_text("x\n" * 100)
    outcome = WorkspaceTools(grep_seconds=0.0)(_call(workspace, "grep", '{"pattern": "x"}'))
    assert outcome.status == "error"
    assert str(outcome.content).startswith("grep: stopped after 0 s")


@pytest.mark.parametrize(
    "pattern, line, found",
    [
        ("return \\\\d+$", "    return 42", True),  # $ is the end of the line, not of a newline
        ("^def main", "def main():", True),
        ("(?i)HELLO", "hello", True),
        ("hello\\\\Z", "hello", True),  # Python's \\Z, taken as end of line
        ("x{1001}", None, False),  # RE2 caps repeat counts at 1000: an error, never a blow-up
        ("(a)\\\\1", None, False),  # no backreferences: an error the model can act on
    ],
)
def test_grep_keeps_re_syntax_for_ordinary_patterns(
    workspace: Path, pattern: str, line: str | None, found: bool
) -> None:
    (workspace / "src" / "app.py").write_text("def main():\n    return 42\nhello\n")
    outcome = WorkspaceTools()(_call(workspace, "grep", f'{{"pattern": "{pattern}", "path": "src"}}'))
    if line is None:
        assert outcome.status == "error" and "bad pattern" in str(outcome.content)
    else:
        assert outcome.status == "ok" and line in str(outcome.content)


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _socket(path: Path) -> None:
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.close()  # the socket file stays


def _device(path: Path) -> None:
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 5))  # a /dev/zero of our own
    except PermissionError:
        pytest.skip("making a device node needs root")


def _run_briefly(tools: WorkspaceTools, invocation: ToolInvocation) -> ToolOutcome | None:
    """The outcome, or None when the call is still blocked after 10 s (it is left in a daemon thread)."""
    result: list[ToolOutcome] = []
    done = threading.Event()

    def run() -> None:
        result.append(tools(invocation))
        done.set()

    threading.Thread(target=run, daemon=True).start()
    done.wait(timeout=10)
    return result[0] if result else None


@pytest.mark.parametrize("make", [_fifo, _socket, _device], ids=["fifo", "socket", "device"])
@pytest.mark.parametrize(
    "name, arguments",
    [
        ("read", '{"path": "special"}'),
        ("write", '{"path": "special", "content": "x"}'),
        ("read", '{"path": "via-link"}'),
    ],
)
def test_files_that_are_not_regular_are_refused_without_blocking(
    workspace: Path, make: Callable[[Path], None], name: str, arguments: str
) -> None:
    special = workspace / "special"
    make(special)
    os.symlink("special", workspace / "via-link")
    try:
        outcome = _run_briefly(WorkspaceTools(), _call(workspace, name, arguments))
    finally:
        if stat.S_ISFIFO(os.lstat(special).st_mode):  # let a blocked open of the old code go
            with contextlib.suppress(OSError):
                os.close(os.open(special, os.O_RDWR | os.O_NONBLOCK))
    assert outcome is not None, f"{name} blocked on a {make.__name__[1:]}"
    assert outcome.status == "error"
    assert "not a regular file" in str(outcome.content)


def test_grep_and_list_pass_over_files_that_are_not_regular(workspace: Path) -> None:
    os.mkfifo(workspace / "src" / "pipe")
    os.symlink("/dev/zero", workspace / "src" / "zero")
    found = _run_briefly(WorkspaceTools(), _call(workspace, "grep", '{"pattern": "return", "path": "src"}'))
    assert found is not None and found.content == "src/app.py:2:    return 42"
    listed = WorkspaceTools()(_call(workspace, "list", '{"path": "src"}'))
    assert listed.content == "app.py\npipe\nzero@"
    zero = WorkspaceTools()(_call(workspace, "read", '{"path": "src/zero"}'))
    assert zero.status == "error" and "outside the workspace" in str(zero.content)


def test_symlinks_inside_the_workspace_still_work(workspace: Path) -> None:
    os.symlink("src/app.py", workspace / "app-link")
    os.symlink(str(workspace / "src"), workspace / "src-link")  # absolute, inside
    os.symlink("../README", workspace / "src" / "readme-link")
    tools = WorkspaceTools()
    read = tools(_call(workspace, "read", '{"path": "app-link"}'))
    assert "return 42" in str(read.content) and read.files == (FileAccess("src/app.py", "read"),)
    through = tools(_call(workspace, "read", '{"path": "src-link/readme-link"}'))
    assert through.content == "hello\n" and through.files == (FileAccess("README", "read"),)
    wrote = tools(_call(workspace, "write", '{"path": "src-link/new/deep/n.md", "content": "ok"}'))
    assert wrote.files == (FileAccess("src/new/deep/n.md", "write"),)
    assert (workspace / "src" / "new" / "deep" / "n.md").read_text() == "ok"


def test_a_symlink_loop_is_an_error(workspace: Path) -> None:
    os.symlink("b", workspace / "a")
    os.symlink("a", workspace / "b")
    outcome = WorkspaceTools()(_call(workspace, "read", '{"path": "a"}'))
    assert outcome.status == "error" and "too many symlinks" in str(outcome.content)


_SWAPPER = """
import os, random, shutil, sys
mode, name, inside, outside, ready = sys.argv[1:6]
rng = random.Random(7)


def attempt(step, *args):
    try:
        step(*args)
    except OSError:
        pass  # the tool call made or took something meanwhile: go on


open(ready, "w").close()
for _ in range(10_000_000):  # bounded: the test kills it long before
    if mode == "link":  # the name: absent, then a symlink in or out
        attempt(os.unlink, name)
        attempt(os.symlink, inside if rng.random() < 0.5 else outside, name)
    else:  # the name: the real directory (moved to `inside` and back), or a symlink to `outside`
        attempt(os.rename, name, inside)
        attempt(os.symlink, outside, name)
        attempt(os.unlink, name)
        if os.path.isdir(name) and not os.path.islink(name):
            shutil.rmtree(name, ignore_errors=True)  # one the tool call made while ours was away
        attempt(os.rename, inside, name)
"""


def _race(
    mode: str, name: Path, inside: Path, outside: Path, attempt: Callable[[int], None], tries: int
) -> None:
    """Swap `name` (see _SWAPPER) while `attempt` runs `tries` times (index 0, 1, ...).

    The swapper is another process, so it runs truly alongside the tool
    call; a thread of this process could swap only while the call waits on
    the GIL. Old code that resolved a path and then opened it escaped the
    workspace a few times in a thousand tries.
    """
    ready = name.parent.parent / f"{name.name}.ready"
    swapper = subprocess.Popen(
        [sys.executable, "-c", _SWAPPER, mode, str(name), str(inside), str(outside), str(ready)]
    )
    try:
        while not ready.exists():  # started: the swaps begin right after
            if swapper.poll() is not None:
                raise AssertionError("the swapper did not start")
            os.sched_yield()
        for index in range(tries):
            attempt(index)
    finally:
        swapper.kill()
        swapper.wait()


def _tolerant(tools: WorkspaceTools, workspace: Path, name: str, arguments: str) -> str:
    """The content of a call, or the name of the OS error it raised (the old code raised in races)."""
    try:
        return str(tools(_call(workspace, name, arguments)).content)
    except OSError as exc:
        return type(exc).__name__


@pytest.fixture
def outside(workspace: Path) -> Path:
    """A directory beside the workspace with a `secret.txt` of its own."""
    folder = workspace.parent / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text("top secret\n")
    return folder


def test_a_symlink_swapped_in_during_a_read_never_leads_outside(workspace: Path, outside: Path) -> None:
    (workspace / "inside.txt").write_text("inside\n")
    tools = WorkspaceTools()

    def read(index: int) -> None:
        content = _tolerant(tools, workspace, "read", '{"path": "link"}')
        assert "top secret" not in content, f"read escaped the workspace on try {index}"

    _race("link", workspace / "link", workspace / "inside.txt", outside / "secret.txt", read, tries=3_000)


def test_a_directory_swapped_for_a_symlink_never_leads_outside(workspace: Path, outside: Path) -> None:
    (workspace / "sub").mkdir()
    (workspace / "sub" / "secret.txt").write_text("inside\n")
    tools = WorkspaceTools()

    def read(index: int) -> None:
        for name in ("read", "grep"):
            arguments = '{"path": "sub/secret.txt", "pattern": "."}'
            content = _tolerant(tools, workspace, name, arguments)
            assert "top secret" not in content, f"{name} escaped the workspace on try {index}"

    _race("dir", workspace / "sub", workspace / "sub.away", outside, read, tries=3_000)


def test_a_symlink_swapped_in_during_a_write_never_writes_outside(workspace: Path, outside: Path) -> None:
    tools = WorkspaceTools()

    def write_file(index: int) -> None:
        _tolerant(tools, workspace, "write", f'{{"path": "link", "content": "write {index}"}}')

    def write_under(index: int) -> None:
        _tolerant(tools, workspace, "write", f'{{"path": "sub/made/n{index % 7}.txt", "content": "x"}}')

    _race(
        "link", workspace / "link", workspace / "inside.txt", outside / "secret.txt", write_file, tries=1_000
    )
    assert (outside / "secret.txt").read_text() == "top secret\n"
    (workspace / "sub").mkdir()
    _race("dir", workspace / "sub", workspace / "sub.away", outside, write_under, tries=2_000)
    assert sorted(path.name for path in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "top secret\n"
