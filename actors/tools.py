"""Tools: the executor interface a host gives cairn, and a ready set for one workspace.

The session actor calls the host's executor once per tool call the model
makes, in order, on the host's tool threads, after the assistant message
that asked for it is durable (effects run after the acknowledgement); the
session waits for each result as a mode of its own and takes other
messages meanwhile (`actors.session.machine`). The executor returns
a `ToolOutcome`: content, status, effect and the files it touched (W1). An
executor that raises is recorded as an `error` result the model sees; it
never fails the turn. cairn budgets what the model sees of the content (X)
and records all of it (large payloads in the blob store).

`WorkspaceTools` is the set the demo uses: `read`, `write`, `list` and
`grep` on one directory tree. Every path is opened under the session's
workspace one name at a time (`actors.workspace_fs`) and refused when it
leaves it: `..`, absolute paths outside, and symlinks leading outside are
all errors, never followed, even when a symlink is swapped in mid-call.
Only regular files are read or written. No call can hold the host for
long: `grep` matches in linear time without the GIL, under a deadline.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, Protocol

import msgspec
import re2

from cairn.actors.workspace_fs import Refused, Workspace
from cairn.events.errors import InputError
from cairn.events.kinds import FileAccess
from cairn.events.model import ImagePart, Part, TextPart, ToolCall, ToolEffect, ToolStatus


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
    `server` names what ran the call when it is not the host itself (an MCP
    server, `McpTools`), and `server_tool` the tool's own name there; both
    are recorded in the call's `tool-result`, for audit.
    """

    content: str | tuple[Part, ...]
    status: ToolStatus = "ok"
    effect: ToolEffect | None = None
    files: tuple[FileAccess, ...] = ()
    server: str | None = None
    server_tool: str | None = None


class Deferred(msgspec.Struct, frozen=True, kw_only=True):
    """What an executor returns for a call whose result comes later, from outside the executor.

    The turn waits (the session takes other messages meanwhile) until the
    host posts the result with `Host.resolve_tool(session, call_id,
    outcome)`: a call a client runs, or one that needs a person's yes or no
    first (an approval pause). After `timeout_s` (None: the host's
    `HostConfig.deferred_timeout_s`) without one, the model gets an error
    result saying no result came, and a late `resolve_tool` is refused. The
    wait is recorded (`tool-deferred`) and survives a restart: a host stopped
    meanwhile leaves the turn open in the log (its handles end `failed`, error
    class `TurnSuspended`), and loading the session resumes the wait with
    the time its timeout has left.
    """

    timeout_s: float | None = None


_outcome_encoder = msgspec.json.Encoder()
_outcome_decoder = msgspec.json.Decoder(ToolOutcome)


def check_outcome(value: object) -> ToolOutcome | str:
    """`value` as a well-formed ToolOutcome, or what is wrong with it (in words, for the model).

    msgspec does not check types when a Struct is built, so a host's
    `ToolOutcome(content=12345)` is only caught here: the outcome goes
    through the same JSON round trip as the log line it becomes, and its
    parts must be text or images (`BlobPart`s are the store's own).
    """
    if not isinstance(value, ToolOutcome):
        return f"returned {type(value).__name__}, not a ToolOutcome"
    try:
        outcome = _outcome_decoder.decode(_outcome_encoder.encode(value))
    except msgspec.ValidationError as exc:
        return f"returned a malformed ToolOutcome: {exc}"
    except UnicodeEncodeError:
        return "returned text that is not valid Unicode (a lone surrogate)"
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        return f"returned a ToolOutcome that cannot be recorded: {type(exc).__name__}: {exc}"
    if isinstance(outcome.content, tuple):
        for index, part in enumerate(outcome.content):
            if isinstance(part, ImagePart):
                if not part.media_type.startswith("image/") or not (part.data or part.url):
                    return f"returned image part {index} without an image media type and data or url"
            elif not isinstance(part, TextPart):
                kind = type(part).__name__
                return f"returned part {index}, a {kind}; a tool result takes TextPart and ImagePart"
    return outcome


class ToolExecutor(Protocol):
    """Runs one tool call. May also have `schemas` (JSON strings) and `read_only` (names)."""

    def __call__(self, invocation: ToolInvocation) -> ToolOutcome | Deferred: ...


class ToolError(InputError):
    """A tool refused its call (the model's arguments are at fault); the model is shown the message."""


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

    Paths are opened race-free, one name at a time (`actors.workspace_fs`):
    symlinks are followed only while they stay inside the workspace, and
    only regular files are read or written (FIFOs, sockets and devices are
    refused without blocking). Limits keep one call bounded: `read` returns
    at most `max_read_bytes`, `grep` at most `max_matches` lines and stops
    after `grep_seconds` in all, `list` at most `max_entries` names.
    Thread-safe (no state between calls).

    `grep` runs RE2 (the `google-re2` package), whose matching time is
    linear in the text and which releases the GIL while it matches, so no
    pattern can freeze the host's other threads. Its syntax is Python's
    `re` for ordinary patterns, except: no backreferences or look-around
    (the model gets a "bad pattern" error and can rephrase); `\\d`, `\\w`,
    `\\s` and `\\b` are ASCII-only; a repeat count is at most 1000; `\\Z`
    is taken as end of line. Each line is matched without its line ending,
    and a line longer than 256 KiB in pieces of 256 KiB.
    """

    schemas = SCHEMAS
    read_only = ("read", "list", "grep")

    def __init__(
        self,
        *,
        max_read_bytes: int = 256 * 1024,
        max_matches: int = 200,
        max_entries: int = 500,
        grep_seconds: float = 10.0,
    ) -> None:
        self.max_read_bytes = max_read_bytes
        self.max_matches = max_matches
        self.max_entries = max_entries
        self.grep_seconds = grep_seconds
        self._tools: dict[str, Callable[[Workspace, dict[str, Any]], ToolOutcome]] = {
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
            arguments = invocation.arguments()
            with Workspace(invocation.workspace) as workspace:
                return tool(workspace, arguments)
        except (ToolError, Refused) as exc:
            message = str(exc)
        except OSError as exc:  # the machine refused (too many open files, I/O error)
            message = f"failed: {exc.strerror or type(exc).__name__}"
        effect: ToolEffect = "write" if invocation.name == "write" else "read"
        return ToolOutcome(content=f"{invocation.name}: {message}", status="error", effect=effect)

    # -- paths --------------------------------------------------------------------------

    @staticmethod
    def resolve(workspace: str, path: object) -> tuple[str, str]:
        """(real absolute path, path relative to the workspace); ToolError when it leaves it.

        For showing a path only: the tools themselves open through
        `Workspace`, never a resolved path (which a symlink swapped in
        later could redirect).
        """
        try:
            with Workspace(workspace) as root:
                opened = root.open(path, "any")
                opened.close()
        except Refused as exc:
            raise ToolError(str(exc)) from None
        return os.path.join(root.root, opened.path), opened.path

    # -- the tools ------------------------------------------------------------------------

    def _read(self, workspace: Workspace, args: dict[str, Any]) -> ToolOutcome:
        opened = workspace.open(args.get("path"), "file")
        with open(opened.fd, "rb", closefd=True) as handle:
            opened.fd = -1
            try:
                data = handle.read(self.max_read_bytes + 1)
            except OSError as exc:
                raise ToolError(f"cannot read {opened.path}: {exc.strerror}") from None
        text = data[: self.max_read_bytes].decode("utf-8", errors="replace")
        if len(data) > self.max_read_bytes:
            text += f"\n[... read stopped at {self.max_read_bytes} bytes]"
        return ToolOutcome(content=text, effect="read", files=(FileAccess(opened.path, "read"),))

    def _write(self, workspace: Workspace, args: dict[str, Any]) -> ToolOutcome:
        content = args.get("content")
        if not isinstance(content, str):
            raise ToolError("content must be a string")
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError:
            raise ToolError("content is not valid Unicode text (a lone surrogate)") from None
        opened = workspace.open(args.get("path"), "file", create=True)
        with open(opened.fd, "wb", closefd=True) as handle:
            opened.fd = -1
            try:
                os.ftruncate(handle.fileno(), 0)
                handle.write(data)
            except OSError as exc:
                raise ToolError(f"cannot write {opened.path}: {exc.strerror}") from None
        return ToolOutcome(
            content=f"wrote {len(content)} chars to {opened.path}",
            effect="write",
            files=(FileAccess(opened.path, "write"),),
        )

    def _list(self, workspace: Workspace, args: dict[str, Any]) -> ToolOutcome:
        opened = workspace.open(args.get("path", "."), "dir")
        try:
            with os.scandir(opened.fd) as entries:
                lines = sorted(_listed(entry) for entry in entries)
        except OSError as exc:
            raise ToolError(f"cannot list {opened.path}: {exc.strerror}") from None
        finally:
            opened.close()
        more = len(lines) - self.max_entries
        body = "\n".join(lines[: self.max_entries]) + (f"\n[... {more} more]" if more > 0 else "")
        return ToolOutcome(content=body or "(empty)", effect="read")

    def _grep(self, workspace: Workspace, args: dict[str, Any]) -> ToolOutcome:
        regex = compile_pattern(args.get("pattern"))
        deadline = time.monotonic() + self.grep_seconds
        start = workspace.open(args.get("path", "."), "any")
        matches: list[str] = []
        searched = 0
        try:
            for opened in workspace.files(start):
                searched += 1
                with open(opened.fd, "rb", closefd=True) as handle:
                    opened.fd = -1
                    for number, line in _lines(handle):
                        if regex.search(line) is not None:
                            matches.append(f"{opened.path}:{number}:{_clip_line(line)}")
                            if len(matches) >= self.max_matches:
                                return ToolOutcome(content="\n".join(matches), effect="read")
                        if time.monotonic() > deadline:
                            return self._grep_stopped(matches, searched)
                if time.monotonic() > deadline:
                    return self._grep_stopped(matches, searched)
        finally:
            start.close()
        return ToolOutcome(content="\n".join(matches) or "no matches", effect="read")

    def _grep_stopped(self, matches: list[str], searched: int) -> ToolOutcome:
        note = (
            f"grep: stopped after {self.grep_seconds:g} s, in file {searched}, with {len(matches)} "
            "matches so far; narrow the path or the pattern"
        )
        return ToolOutcome(content="\n".join([note, *matches]), status="error", effect="read")


# --- grep's pattern and lines ---------------------------------------------------------------

#: longest pattern grep takes
MAX_PATTERN_CHARS = 4_096
#: grep matches a longer line in pieces of this many bytes
MAX_LINE_BYTES = 256 * 1024
#: chars of a matching line shown
MAX_SHOWN_CHARS = 1_000
#: RE2's memory budget per pattern (compiled program and DFA cache); RE2 falls back to
#: its slower, still linear, NFA when the DFA outgrows it
RE2_MAX_MEM = 2 * 1024 * 1024

_END_OF_TEXT = re.compile(r"(?<!\\)((?:\\\\)*)\\Z")


def compile_pattern(pattern: object) -> Any:
    """The RE2 regex of a grep pattern; ToolError naming what is wrong with it."""
    if not isinstance(pattern, str) or not pattern:
        raise ToolError("pattern must be a non-empty string")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ToolError(f"pattern is {len(pattern)} chars; at most {MAX_PATTERN_CHARS}")
    options = re2.Options()
    options.log_errors = False
    options.max_mem = RE2_MAX_MEM
    try:
        return re2.compile(_END_OF_TEXT.sub(r"\1\\z", pattern), options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", errors="replace")
        raise ToolError(f"bad pattern: {reason} (RE2 syntax: no backreferences or look-around)") from None
    except UnicodeEncodeError:
        raise ToolError("bad pattern: not valid Unicode text (a lone surrogate)") from None


def _lines(handle: BinaryIO) -> Iterator[tuple[int, str]]:
    """(line number, text without its line ending) of a file, long lines in pieces."""
    number = 1
    while True:
        chunk = handle.readline(MAX_LINE_BYTES)
        if not chunk:
            return
        ended = chunk.endswith(b"\n")
        text = chunk.decode("utf-8", errors="replace")
        yield number, text.rstrip("\r\n") if ended else text
        if ended:
            number += 1


def _clip_line(line: str) -> str:
    line = line.rstrip()
    return line if len(line) <= MAX_SHOWN_CHARS else line[:MAX_SHOWN_CHARS] + "…"


def _listed(entry: os.DirEntry[str]) -> str:
    """A name as `list` shows it: a directory with `/`, a symlink with `@` (as `ls -F`)."""
    if entry.is_symlink():
        return entry.name + "@"
    if entry.is_dir(follow_symlinks=False):
        return entry.name + "/"
    return entry.name
