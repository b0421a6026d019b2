"""The scripted coding agent of the demo: its model settings, its behaviour and its injected faults."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cairn import SessionSettings
from cairn.actors.provider.base import ProviderRequest
from cairn.actors.provider.scripted import Outcome, Reply, ScriptedProvider, context_limit, http_error
from cairn.actors.session.profile import tools_json
from cairn.actors.tokens import TokenCounter
from cairn.demo.tasks import pick_modules
from cairn.events.model import TextPart, ToolCall

FALLBACK_SESSION = 3  # its first summary call fails three times: the compaction falls back
REACTIVE_SESSION = 5  # its provider rejects one request as too long: reactive recovery
SYSTEM_PROMPT = (
    "You are a careful coding agent working in a small Python repository. Use the tools to look "
    "before you change anything, keep notes of what you find, and report precisely."
)
SETTINGS = SessionSettings(
    model="scripted-coder", context_window=16_000, max_output_tokens=2_000, system_prompt=SYSTEM_PROMPT
)
_TAG = re.compile(r"#(demo-\d+-t\d+)")
_DEF = re.compile(r"^def (\w+)\((.*)\):")


def _text_of(content: Any) -> str:
    """The text of a message's content, a string or its text parts."""
    if isinstance(content, str):
        return content
    return "".join(part.text for part in content if isinstance(part, TextPart))


class DemoAgent:
    """A deterministic coding agent: for each task, list, read three files, grep, write notes, report.

    Its progress is kept per task tag (the tag survives compaction inside the
    active-task reminder), so a task is never redone after a checkpoint. It
    answers summary requests with the scripted provider's ledger summary.
    """

    def __init__(
        self,
        sid: str,
        *,
        overflow_at: int | None,
        measure: Callable[[ProviderRequest], int],
        mcp_workspace: Path | None = None,
    ) -> None:
        self.sid = sid
        #: the session's workspace when its tools are the MCP filesystem server's (`cairn demo --mcp`)
        self.mcp_workspace = mcp_workspace
        self.steps: dict[str, int] = {}
        self.overflow_at = overflow_at
        self.measure = measure
        self._lock = threading.Lock()

    def __call__(self, request: ProviderRequest) -> Outcome | None:
        """The next step of the task the request's last user message names; None for summary requests."""
        if request.purpose != "turn":
            return None
        match = None
        for message in reversed(request.messages):
            if message.role == "user" and message.meta.origin in ("", "active-task"):
                match = _TAG.search(_text_of(message.content))
                break
        if match is None:
            return Reply(text="Ready for the next task.")
        tag = match.group(1)
        with self._lock:
            if self.overflow_at is not None and self.measure(request) >= self.overflow_at:
                self.overflow_at = None
                return context_limit()  # once: the provider says the prompt is too long
            step = self.steps.get(tag, 0)
            self.steps[tag] = step + 1
        files = [f"src/{name}.py" for name in pick_modules(tag, 3)]
        handoff = request.messages[-1].meta.origin == "handoff"

        def call(name: str, arguments: dict[str, str]) -> tuple[ToolCall, ...]:
            if self.mcp_workspace is not None:
                name, arguments = mcp_call(self.mcp_workspace, name, arguments)
            return (ToolCall(f"{tag}-s{step}", name, json.dumps(arguments)),)

        if step == 0:
            return Reply(text="Let me look at the layout first.", tool_calls=call("list", {"path": "src"}))
        if step <= 3:
            path = files[step - 1]
            return Reply(text=f"Reading {path}.", tool_calls=call("read", {"path": path}))
        if step == 4:
            grep = call("grep", {"pattern": "TODO", "path": "src"})
            return Reply(text="Searching for open TODOs.", tool_calls=grep)
        if step == 5:
            notes = f"# Notes for {tag}\n\nRead: {', '.join(files)}.\nOpen TODOs were listed by grep.\n"
            return Reply(
                text="Writing my notes down.",
                tool_calls=call("write", {"path": f"notes/{tag}.md", "content": notes}),
            )
        if step == 6:
            return Reply(text=self._report(request, tag, files, handoff), reasoning="Compose the report.")
        return Reply(text=f"Task {tag} is complete.")

    @staticmethod
    def _report(request: ProviderRequest, tag: str, files: list[str], handoff: bool) -> str:
        """The task's report, quoting what the tools returned (as far as it is still in context)."""
        read: dict[str, str] = {}
        todos: list[str] = []
        for message in request.messages:
            call_id = message.tool_call_id or ""
            if message.role != "tool" or not call_id.startswith(f"{tag}-s"):
                continue
            step = int(call_id.rsplit("-s", 1)[1])
            if 1 <= step <= 3:
                read[files[step - 1]] = _text_of(message.content)
            elif step == 4:
                todos = [line for line in _text_of(message.content).splitlines() if "TODO" in line]
        lines = [f"Report for {tag}.", "", "Findings, function by function:"]
        for path in files:
            source = read.get(path)
            if source is None:
                lines.append(f"- {path}: its contents are no longer in my context; see notes/{tag}.md.")
                continue
            rows = source.splitlines()
            for number, row in enumerate(rows):
                found = _DEF.match(row)
                if found is None:
                    continue
                after = rows[number + 1].strip() if number + 1 < len(rows) else ""
                state = "has a docstring" if after.startswith('"""') else f"lacks a docstring ({after[2:]})"
                lines.append(
                    f"- {path} line {number + 1}: {found.group(1)}({found.group(2)}) {state}; "
                    "it sums math.ceil over at most `limit` items."
                )
        if todos:
            lines += ["", "Proposed order for the open TODOs (oldest module first):"]
            lines += [
                f"{n}. {todo.split(':', 2)[-1].strip()} ({todo.split(':', 1)[0]})"
                for n, todo in enumerate(sorted(todos), 1)
            ]
        lines += ["", "The tests only check that totals are non-negative, so none of this is verified yet."]
        if handoff:
            lines.append(
                "State for the rollover: objective - finish the review tasks one by one; decisions - notes "
                f"live in notes/; changes - notes/{tag}.md written; verification - none run yet; blockers - "
                "none; next action - start the next task."
            )
        lines.append(f"EXACT CONTINUATION RECORD [Exact next action] :: run pytest tests/ after {tag}")
        return "\n".join(lines)


def mcp_call(workspace: Path, name: str, arguments: dict[str, str]) -> tuple[str, dict[str, str]]:
    """The agent's call of `name` (list, read, grep, write; paths relative to the workspace) as a call
    of the MCP reference filesystem server's tools (prefixed `fs__`; absolute paths). It has no
    search of contents: the grep step finds the Python files by name instead."""
    where = str(workspace / arguments.get("path", "."))
    match name:
        case "list":
            return "fs__list_directory", {"path": where}
        case "read":
            return "fs__read_text_file", {"path": where}
        case "grep":
            return "fs__search_files", {"path": where, "pattern": "*.py"}
        case "write":
            return "fs__write_file", {"path": where, "content": arguments["content"]}
    raise ValueError(f"the demo agent has no tool {name!r}")


def provider_for(sid: str, mcp_workspaces: Path | None = None) -> ScriptedProvider:
    """The scripted model of one demo session (with its injected fault, if it has one).

    It counts prompt tokens as cairn does (cl100k), so its usage agrees with
    the local estimate; the fifth session's provider rejects one request once
    the prompt passes 60 % of the window. A session not named `<...>-N`
    (e.g. one a client sends to `cairn serve`) gets no injected fault. With
    `mcp_workspaces` (`cairn demo --mcp`) its tools are the MCP filesystem
    server's, on the session's folder there (`mcp_call`).
    """
    tail = sid.rsplit("-", 1)[-1]
    index = int(tail) if tail.isascii() and tail.isdigit() else 0
    counter = TokenCounter()

    def measure(request: ProviderRequest) -> int:
        return counter.messages(request.messages) + counter.text(tools_json(request.tools))

    summaries: list[Outcome] = []
    if index == FALLBACK_SESSION:
        summaries = [http_error(503)] * 3  # the first summary fails three times: fallback
    window = SETTINGS.context_window
    overflow = window * 6 // 10 if index == REACTIVE_SESSION and window else None
    return ScriptedProvider(
        summaries=summaries,
        responder=DemoAgent(
            sid,
            overflow_at=overflow,
            measure=measure,
            mcp_workspace=None if mcp_workspaces is None else mcp_workspaces / sid,
        ),
        context_window=SETTINGS.context_window,
        chunk_chars=48,
        prompt_tokens=measure,
        keep_requests=False,
    )
