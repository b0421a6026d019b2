"""Tools: the executor interface a host gives cairn, and a ready set for one workspace.

The session actor calls the host's executor once per tool call the model
makes, on the session's thread, after the assistant message that asked for
it is durable (effects run after the acknowledgement). The executor returns
a `ToolOutcome`: content, status, effect and the files it touched (W1). An
executor that raises is recorded as an `error` result the model sees; it
never fails the turn. cairn budgets what the model sees of the content (X)
and records all of it (large payloads in the blob store).

`WorkspaceTools` is the set the demo uses: `read`, `write`, `list` and
`grep` on one directory tree. Every path is resolved against the session's
workspace and refused when it leaves it: `..`, absolute paths outside, and
symlinks whose real location is outside are all errors, never followed.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from typing import Any, Protocol

import msgspec

from events.kinds import FileAccess
from events.model import Part, ToolCall, ToolEffect, ToolStatus


class ToolInvocation(msgspec.Struct, frozen=True, kw_only=True):
    """One tool call to run, with the session it belongs to."""

    session: str
    workspace: str
    turn_id: str
    call: ToolCall

    @property
    def name(self) -> str:
        return self.call.name

    def arguments(self) -> dict[str, Any]:
        """The call's JSON arguments as a dict (ToolError when they are not a JSON object)."""
        try:
            value = json.loads(self.call.arguments or "{}")
        except json.JSONDecodeError as exc:
            raise ToolError(f"arguments are not JSON: {exc.msg}") from None
        if not isinstance(value, dict):
            raise ToolError("arguments must be a JSON object")
        return value


class ToolOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What one tool call produced.

    `effect` None means: `read` for the session's read-only tools, else
    `write`. `files` lists the files read, written or deleted (for W1).
    """

    content: str | tuple[Part, ...]
    status: ToolStatus = "ok"
    effect: ToolEffect | None = None
    files: tuple[FileAccess, ...] = ()


class ToolExecutor(Protocol):
    """Runs one tool call. May also have `schemas` (JSON strings) and `read_only` (names)."""

    def __call__(self, invocation: ToolInvocation) -> ToolOutcome: ...


class ToolError(Exception):
    """A tool refused its call; the message is what the model is shown."""


def _schema(name: str, description: str, properties: dict[str, Any], required: list[str]) -> str:
    body = {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


_PATH = {"type": "string", "description": "a path relative to the workspace"}

SCHEMAS: tuple[str, ...] = (
    _schema("read", "Read a text file of the workspace.", {"path": _PATH}, ["path"]),
    _schema(
        "write",
        "Write a text file of the workspace (created or replaced).",
        {"path": _PATH, "content": {"type": "string"}},
        ["path", "content"],
    ),
    _schema("list", "List a directory of the workspace.", {"path": _PATH}, []),
    _schema(
        "grep",
        "Lines matching a regular expression in the workspace's text files.",
        {"pattern": {"type": "string"}, "path": _PATH},
        ["pattern"],
    ),
)


class WorkspaceTools:
    """`read`, `write`, `list`, `grep`, confined to each session's workspace.

    Limits keep one call's output bounded: `read` returns at most
    `max_read_bytes`, `grep` at most `max_matches` lines, `list` at most
    `max_entries` names. Thread-safe (no state between calls).
    """

    schemas = SCHEMAS
    read_only = ("read", "list", "grep")

    def __init__(
        self, *, max_read_bytes: int = 256 * 1024, max_matches: int = 200, max_entries: int = 500
    ) -> None:
        self.max_read_bytes = max_read_bytes
        self.max_matches = max_matches
        self.max_entries = max_entries
        self._tools: dict[str, Callable[[str, dict[str, Any]], ToolOutcome]] = {
            "read": self._read,
            "write": self._write,
            "list": self._list,
            "grep": self._grep,
        }

    def __call__(self, invocation: ToolInvocation) -> ToolOutcome:
        tool = self._tools.get(invocation.name)
        if tool is None:
            return ToolOutcome(content=f"unknown tool {invocation.name!r}", status="error", effect="read")
        try:
            return tool(invocation.workspace, invocation.arguments())
        except ToolError as exc:
            effect: ToolEffect = "write" if invocation.name == "write" else "read"
            return ToolOutcome(content=f"{invocation.name}: {exc}", status="error", effect=effect)

    # -- paths --------------------------------------------------------------------------

    @staticmethod
    def resolve(workspace: str, path: object) -> tuple[str, str]:
        """(real absolute path, path relative to the workspace); ToolError when it leaves it."""
        if not isinstance(path, str) or "\x00" in path:
            raise ToolError("path must be a string")
        root = os.path.realpath(workspace)
        joined = os.path.normpath(os.path.join(root, path))
        if not _inside(joined, root):
            raise ToolError(f"{path!r} is outside the workspace")
        real = os.path.realpath(joined)
        if not _inside(real, root):
            raise ToolError(f"{path!r} leads outside the workspace through a symlink")
        return real, os.path.relpath(real, root)

    # -- the tools ------------------------------------------------------------------------

    def _read(self, workspace: str, args: dict[str, Any]) -> ToolOutcome:
        real, shown = self.resolve(workspace, args.get("path"))
        try:
            with open(real, "rb") as handle:
                data = handle.read(self.max_read_bytes + 1)
        except IsADirectoryError:
            raise ToolError(f"{shown} is a directory") from None
        except OSError as exc:
            raise ToolError(f"cannot read {shown}: {exc.strerror}") from None
        text = data[: self.max_read_bytes].decode("utf-8", errors="replace")
        if len(data) > self.max_read_bytes:
            text += f"\n[... read stopped at {self.max_read_bytes} bytes]"
        return ToolOutcome(content=text, effect="read", files=(FileAccess(shown, "read"),))

    def _write(self, workspace: str, args: dict[str, Any]) -> ToolOutcome:
        content = args.get("content")
        if not isinstance(content, str):
            raise ToolError("content must be a string")
        real, shown = self.resolve(workspace, args.get("path"))
        try:
            os.makedirs(os.path.dirname(real), exist_ok=True)
            with open(real, "w", encoding="utf-8") as handle:
                handle.write(content)
        except OSError as exc:
            raise ToolError(f"cannot write {shown}: {exc.strerror}") from None
        return ToolOutcome(
            content=f"wrote {len(content)} chars to {shown}",
            effect="write",
            files=(FileAccess(shown, "write"),),
        )

    def _list(self, workspace: str, args: dict[str, Any]) -> ToolOutcome:
        real, shown = self.resolve(workspace, args.get("path", "."))
        try:
            names = sorted(os.listdir(real))
        except OSError as exc:
            raise ToolError(f"cannot list {shown}: {exc.strerror}") from None
        lines = [name + ("/" if os.path.isdir(os.path.join(real, name)) else "") for name in names]
        more = len(lines) - self.max_entries
        body = "\n".join(lines[: self.max_entries]) + (f"\n[... {more} more]" if more > 0 else "")
        return ToolOutcome(content=body or "(empty)", effect="read")

    def _grep(self, workspace: str, args: dict[str, Any]) -> ToolOutcome:
        pattern = args.get("pattern")
        if not isinstance(pattern, str) or not pattern:
            raise ToolError("pattern must be a non-empty string")
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise ToolError(f"bad pattern: {exc}") from None
        real, _ = self.resolve(workspace, args.get("path", "."))
        root = os.path.realpath(workspace)
        matches: list[str] = []
        for path in _walk(real, root):
            rel = os.path.relpath(path, root)
            try:
                with open(path, encoding="utf-8", errors="replace") as handle:
                    for number, line in enumerate(handle, 1):
                        if regex.search(line):
                            matches.append(f"{rel}:{number}:{line.rstrip()}")
                            if len(matches) >= self.max_matches:
                                return ToolOutcome(content="\n".join(matches), effect="read")
            except OSError:
                continue
        return ToolOutcome(content="\n".join(matches) or "no matches", effect="read")


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _walk(start: str, root: str) -> list[str]:
    """Regular files under `start` whose real location stays inside `root`, sorted."""
    if os.path.isfile(start):
        return [start]
    found: list[str] = []
    for folder, dirs, files in os.walk(start):
        dirs[:] = sorted(d for d in dirs if _inside(os.path.realpath(os.path.join(folder, d)), root))
        for name in sorted(files):
            path = os.path.join(folder, name)
            if _inside(os.path.realpath(path), root) and os.path.isfile(path):
                found.append(path)
    return found
