"""`cairn demo`: concurrent agent sessions on the embedded scripted provider, from first turn to replay.

    cairn demo [--store DIR] [--sessions N] [--turns M] [--provider scripted|openai] [--json]

One host runs N sessions at once (default 8), M turns each (default 12). Every
session is a scripted coding agent working with real tools (list, read, grep,
write) on its own scratch workspace under `DIR/demo-workspaces/`. The window
is small (16,000 tokens, output cap 2,000), so sessions slim old tool output,
cross the hand-off band, and compact by LLM summary. Two faults are injected:
the third session's first summary call fails three times (503), so that
compaction falls back to the deterministic fallback; the fifth session's
provider rejects one request as too long, so it recovers reactively.

Then the host is stopped (closed, not killed), the store is reopened, and
every session must replay to exactly the state and next request it had live.
Run again on the same store, it continues the same sessions from their logs
(after a crash too: an unfinished turn is marked interrupted first).

`--provider openai` runs the same sessions against an OpenAI-compatible
endpoint configured by the `CAIRN_*` variables (`CAIRN_BASE_URL`,
`CAIRN_API_KEY`, `CAIRN_MODEL`, `CAIRN_CONTEXT_WINDOW`, optionally
`CAIRN_MAX_OUTPUT_TOKENS`; see `actors.provider.config`). The context window
must be set, since the demo sizes its turns by it: each user message carries
workspace files (and a test log) worth about a twelfth of the input budget,
so the context grows whatever the model says and, within about eight turns,
every session crosses the hand-off band and compacts through the endpoint
(an LLM summary, or the fallback when the model's summary fails the gates).
No faults are injected: what the endpoint does is reported as it happened.

The report lists every turn of this run that did not complete, with its
reason (rejected: the session refused the message, e.g. `WorkspaceMismatch`
on a copied store, whose sessions work in the original's workspaces;
failed: the phase and error; error: what sending raised). Tokens are what
the provider reported: `unknown` when it reported no usage, `≥` when some
responses came without it.

Exit status. The run is healthy, and the demo exits 0, when all of these hold:
1. every turn it sent (N x M) completed;
2. after reopening, every session replayed to the same state and next request;
3. the log shows what the demo is for. Scripted: a hand-off, an LLM
   checkpoint, a fallback checkpoint and a reactive recovery (they need the
   defaults' sessions and turns). OpenAI: every session crossed the hand-off
   band and compacted.
Otherwise it exits 1: the run did not do what it says. It exits 2, with one
line on stderr, when it could not run: a `--store` that cannot be a
directory, a store another process writes (`StoreLocked`), an endpoint not
configured, or a store that failed during the run (a full disk): the sessions
stop, and a later run on the same store recovers from the log.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import re
import shlex
import stat
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lmdb
from rich.text import Text

from cairn import Host, HostConfig, SessionSettings, WorkspaceTools, _console
from cairn.actors import placement
from cairn.actors.provider.base import Provider, ProviderRequest, TextDelta
from cairn.actors.provider.config import ProviderConfigError
from cairn.actors.provider.openai_compat import OpenAIProvider
from cairn.actors.provider.scripted import Outcome, Reply, ScriptedProvider, context_limit, http_error
from cairn.actors.session.budget import budget_for
from cairn.actors.session.profile import tools_json
from cairn.actors.tokens import TokenCounter
from cairn.events.codec import Record
from cairn.events.errors import CairnError
from cairn.events.kinds import CheckpointCommitted, TurnFailed, Usage
from cairn.events.model import TextPart, ToolCall
from cairn.store.files import private_dir
from cairn.store.segments import FsyncFn

DEFAULT_SESSIONS = 8
DEFAULT_TURNS = 12
FALLBACK_SESSION = 3  # its first summary call fails three times: the compaction falls back
REACTIVE_SESSION = 5  # its provider rejects one request as too long: reactive recovery
SYSTEM_PROMPT = (
    "You are a careful coding agent working in a small Python repository. Use the tools to look "
    "before you change anything, keep notes of what you find, and report precisely."
)
SETTINGS = SessionSettings(
    model="scripted-coder", context_window=16_000, max_output_tokens=2_000, system_prompt=SYSTEM_PROMPT
)
MODULES = ("billing", "inventory", "shipping", "users", "reports", "search", "auth", "orders")
TASKS = (
    "Review {a} and {b}: list every function without a docstring.",
    "Find the TODO comments in src/ and propose an order to fix them.",
    "Check that {a} validates its inputs the way {b} does.",
    "Summarise how {a} talks to {b}; note any duplicated logic.",
    "Look for magic numbers in {a} and suggest named constants.",
    "Compare the error handling of {a}, {b} and {c}.",
)
_TAG = re.compile(r"#(demo-\d+-t\d+)")
_DEF = re.compile(r"^def (\w+)\((.*)\):")


# --- the scratch workspace ---------------------------------------------------------------


def _module_source(name: str, index: int) -> str:
    lines = [f'"""The {name} module of the demo shop."""', "", "import math", ""]
    for n in range(6):
        fn = f"{name}_{['load', 'check', 'total', 'apply', 'format', 'sync'][n]}"
        lines.append(f"def {fn}(items, limit={10 * (n + index + 1)}):")
        if (n + index) % 3:
            lines.append(f'    """{fn.replace("_", " ").capitalize()} for at most `limit` items."""')
        else:
            lines.append(f"    # TODO({name}): document {fn} and cap the retries at {3 + n}")
        lines.append("    total = 0")
        lines.append("    for item in items[:limit]:")
        lines.append(f"        total += math.ceil(item * {n + 2} / {index + 3})")
        lines.append("    return total")
        lines.append("")
    return "\n".join(lines) + "\n"


def make_workspace(path: Path, index: int) -> None:
    """A small repository to work on; left as it is when it exists (the demo continues)."""
    if path.exists():
        return
    (path / "src").mkdir(parents=True)
    (path / "tests").mkdir()
    (path / "README.md").write_text(
        f"# demo shop {index}\n\nModules: {', '.join(MODULES)}.\nRun the tests with pytest.\n"
    )
    for n, name in enumerate(MODULES):
        (path / "src" / f"{name}.py").write_text(_module_source(name, index + n))
        (path / "tests" / f"test_{name}.py").write_text(
            f"from src.{name} import {name}_total\n\n\ndef test_{name}_total():\n"
            f"    assert {name}_total([1, 2, 3]) >= 0\n"
        )


# --- the scripted agent --------------------------------------------------------------------


def _pick(tag: str, count: int) -> list[str]:
    digest = hashlib.sha256(tag.encode()).digest()
    chosen: list[str] = []
    for byte in digest:
        name = MODULES[byte % len(MODULES)]
        if name not in chosen:
            chosen.append(name)
        if len(chosen) == count:
            break
    return chosen


def task_text(sid: str, turn: int) -> str:
    tag = f"{sid}-t{turn}"
    a, b, c = (f"src/{name}.py" for name in _pick(tag, 3))
    return TASKS[turn % len(TASKS)].format(a=a, b=b, c=c) + f" #{tag}"


def _text_of(content: Any) -> str:
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
        self, sid: str, *, overflow_at: int | None, measure: Callable[[ProviderRequest], int]
    ) -> None:
        self.sid = sid
        self.steps: dict[str, int] = {}
        self.overflow_at = overflow_at
        self.measure = measure
        self._lock = threading.Lock()

    def __call__(self, request: ProviderRequest) -> Outcome | None:
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
        files = [f"src/{name}.py" for name in _pick(tag, 3)]
        handoff = request.messages[-1].meta.origin == "handoff"

        def call(name: str, arguments: dict[str, str]) -> tuple[ToolCall, ...]:
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
            return Reply(text="Writing my notes down.",
                         tool_calls=call("write", {"path": f"notes/{tag}.md", "content": notes}))
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
                lines.append(f"- {path} line {number + 1}: {found.group(1)}({found.group(2)}) {state}; "
                             "it sums math.ceil over at most `limit` items.")
        if todos:
            lines += ["", "Proposed order for the open TODOs (oldest module first):"]
            lines += [f"{n}. {todo.split(':', 2)[-1].strip()} ({todo.split(':', 1)[0]})"
                      for n, todo in enumerate(sorted(todos), 1)]
        lines += ["", "The tests only check that totals are non-negative, so none of this is verified yet."]
        if handoff:
            lines.append(
                "State for the rollover: objective - finish the review tasks one by one; decisions - notes "
                f"live in notes/; changes - notes/{tag}.md written; verification - none run yet; blockers - "
                "none; next action - start the next task."
            )
        lines.append(f"EXACT CONTINUATION RECORD [Exact next action] :: run pytest tests/ after {tag}")
        return "\n".join(lines)


def provider_for(sid: str) -> ScriptedProvider:
    """The scripted model of one demo session (with its injected fault, if it has one).

    It counts prompt tokens as cairn does (cl100k), so its usage agrees with
    the local estimate; the fifth session's provider rejects one request once
    the prompt passes 60 % of the window.
    """
    index = int(sid.rsplit("-", 1)[1])
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
        responder=DemoAgent(sid, overflow_at=overflow, measure=measure),
        context_window=SETTINGS.context_window,
        chunk_chars=48,
        prompt_tokens=measure,
        keep_requests=False,
    )


# --- the two providers ------------------------------------------------------------------------


class DemoSetupError(Exception):
    """The demo cannot run as asked (an endpoint not configured, a store of another model)."""


@dataclass(frozen=True)
class Setup:
    """What differs between the providers: the model, the adapter and the user messages."""

    provider: str
    settings: SessionSettings
    adapter_for: Callable[[str], Provider]
    message: Callable[[str, int, Path], str]
    #: the longest wait for a turn's next event or its end (a real endpoint may be slow)
    wait_s: float = 120.0
    endpoint: str = ""
    close: Callable[[], None] = lambda: None


def scripted_setup() -> Setup:
    return Setup(provider="scripted", settings=SETTINGS, adapter_for=provider_for,
                 message=lambda sid, turn, workspace: task_text(sid, turn))


OPENAI_SYSTEM_PROMPT = (
    "You are a careful coding agent working in a small Python repository. Each task comes with "
    "files attached; use the tools (read, grep, list, write) when you need more. Answer in a few "
    "short paragraphs and report precisely what you found."
)
#: the smallest attachment of a turn, in tokens (the demo needs the context to grow)
MIN_ATTACHMENT_TOKENS = 200


def attachment_tokens(settings: SessionSettings) -> int:
    """About a twelfth of the input budget: a turn alone never jumps the hand-off band (a tenth)."""
    budget = budget_for(settings.context_window, settings.max_output_tokens).input_budget
    assert budget is not None, "checked by openai_setup"
    return max(MIN_ATTACHMENT_TOKENS, budget // 12)


def _test_log(lines: int) -> list[str]:
    rows = []
    for n in range(lines):
        name = MODULES[n % len(MODULES)]
        rows.append(f"tests/test_{name}.py::test_{name}_total[case-{n}] PASSED in 0.0{n % 10}s "
                    f"(limit={10 * (n % 7 + 1)}, items={n % 13})")
    return rows


def _within(lines: list[str], used: int, tokens: int, counter: TokenCounter) -> tuple[list[str], int]:
    """The leading lines that fit in `tokens` with `used` already spent, and the new total."""
    kept: list[str] = []
    for line in lines:
        cost = counter.text(line + "\n")
        if used + cost > tokens:
            break
        kept.append(line)
        used += cost
    return kept, used


def grown_task(sid: str, turn: int, workspace: Path, *, tokens: int, counter: TokenCounter) -> str:
    """The task of `turn` with about `tokens` tokens of material attached: the three files it names,
    as they are in the workspace now, then a test log. The context grows by it whatever the model
    says or does."""
    tag = f"{sid}-t{turn}"
    text = task_text(sid, turn) + " Attached for reference:"
    used = counter.text(text)
    blocks: list[str] = []
    for path in (f"src/{name}.py" for name in _pick(tag, 3)):
        try:
            lines = (workspace / path).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue  # the model may have removed it
        kept, used = _within(lines, used, tokens, counter)
        if kept:
            blocks.append(f"\n\n{path}:\n```python\n" + "\n".join(kept) + "\n```")
        if len(kept) < len(lines):
            break
    log, used = _within(_test_log(4_096), used, tokens, counter)
    if log:
        blocks.append("\n\nThe last test run:\n```\n" + "\n".join(log) + "\n```")
    return text + "".join(blocks)


def openai_setup(environ: dict[str, str] | None = None) -> Setup:
    """The demo on an OpenAI-compatible endpoint from the `CAIRN_*` variables.

    Raises `ProviderConfigError` when the endpoint is not configured, and
    `DemoSetupError` when the context window is missing or leaves no input budget.
    """
    provider = OpenAIProvider.from_env(environ)
    config = provider.config
    try:
        if config.context_window is None:
            raise DemoSetupError(
                "CAIRN_CONTEXT_WINDOW: the demo must know the model's context window to size its "
                "turns; set it to the window of CAIRN_MODEL (or smaller, e.g. CAIRN_CONTEXT_WINDOW=16000)"
            )
        settings = SessionSettings(model=config.model, context_window=config.context_window,
                                   max_output_tokens=config.max_output_tokens,
                                   system_prompt=OPENAI_SYSTEM_PROMPT)
        if budget_for(settings.context_window, settings.max_output_tokens).input_budget is None:
            raise DemoSetupError(
                f"CAIRN_CONTEXT_WINDOW={config.context_window} leaves no input budget after the output "
                "reserve (the output cap, else 10 % of the window and at least 8,192 tokens): set "
                "CAIRN_MAX_OUTPUT_TOKENS below the window, or use a larger window"
            )
    except DemoSetupError:
        provider.close()
        raise
    counter = TokenCounter()
    tokens = attachment_tokens(settings)

    def message(sid: str, turn: int, workspace: Path) -> str:
        return grown_task(sid, turn, workspace, tokens=tokens, counter=counter)

    return Setup(provider="openai", settings=settings, adapter_for=lambda sid: provider, message=message,
                 wait_s=max(900.0, 2 * config.timeout_s), endpoint=config.endpoint, close=provider.close)


# --- progress and the report ------------------------------------------------------------------


class DemoStoreFailed(Exception):
    """The store failed during the run (a full disk, an I/O error): the demo stopped its sessions."""


@dataclass(frozen=True)
class TurnOutcome:
    """How one turn of this run ended for its client: the turn's result, or what `send` raised.

    `status` is the result's (`completed`, `failed` in `phase`, `rejected`),
    or `error` when sending or waiting raised (`error_class` says what).
    """

    turn: int
    status: str
    phase: str | None = None
    error_class: str = ""
    error: str = ""
    requests: int = 0

    @property
    def ok(self) -> bool:
        return self.status == "completed"

    @property
    def reason(self) -> str:
        """`rejected: WorkspaceMismatch: session ... works in ...`, `failed in provider: ...`."""
        what = f"{self.status} in {self.phase}" if self.phase else self.status
        detail = ": ".join(part for part in (self.error_class, self.error) if part)
        return f"{what}: {detail}" if detail else what


@dataclass
class Live:
    """What each session is doing, for the progress view (written by the client threads)."""

    turn: int = 0
    of: int = 0
    doing: str = "waiting"
    requests: int = 0
    handoffs: int = 0
    checkpoints: int = 0
    chars: int = 0
    done: bool = False
    outcomes: list[TurnOutcome] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return sum(not outcome.ok for outcome in self.outcomes)


@dataclass
class SessionReport:
    session: str
    turns: int = 0
    requests: int = 0
    #: provider-reported tokens summed over usage events; None (unknown) when no response reported any
    tokens: int | None = 0
    responses: int = 0
    responses_without_usage: int = 0
    handoffs: int = 0
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    provider_errors: int = 0
    replayed: bool = False
    #: this run: the turns sent, those completed, and every other one with its reason
    sent: int = 0
    completed: int = 0
    problems: list[dict[str, Any]] = field(default_factory=list)

    @property
    def crossed_handoff(self) -> bool:
        """It wrote a hand-off, or compacted at the threshold (so it passed the band's start too)."""
        return self.handoffs > 0 or any(c["trigger"] == "threshold" for c in self.checkpoints)


def _describe(record: Record) -> str:
    event = record.event
    kind = record.line_kind
    if kind == "tool-result":
        return f"tool {getattr(event, 'tool_name', '')}"
    if kind == "checkpoint-committed" and isinstance(event, CheckpointCommitted):
        return f"checkpoint ({event.trigger}/{event.strategy})"
    return kind


def _one_turn(host: Host, setup: Setup, sid: str, workspace: Path, n: int, live: Live,
              lock: threading.Lock) -> TurnOutcome:
    """Send turn `n` and follow it to its end; what sending or waiting raised is its outcome."""
    try:
        turn = host.send(sid, setup.message(sid, n, workspace), workspace=workspace)
        for item in turn.events(timeout=setup.wait_s):
            with lock:
                if isinstance(item, TextDelta):
                    live.chars += len(item.text)
                    live.doing = "streaming"
                    continue
                if not isinstance(item, Record):
                    continue
                live.doing = _describe(item)
                if item.line_kind == "request":
                    live.requests += 1
                elif item.line_kind == "checkpoint-committed":
                    live.checkpoints += 1
        result = turn.result(timeout=setup.wait_s)
    except Exception as error:  # a client thread reports, never dies with a traceback
        return TurnOutcome(turn=n, status="error", error_class=type(error).__name__, error=str(error))
    return TurnOutcome(turn=n, status=result.status, phase=result.phase, error_class=result.error_class,
                       error=result.error, requests=result.requests)


def _client(host: Host, setup: Setup, sid: str, workspace: Path, first: int, turns: int, live: Live,
            lock: threading.Lock, plain: bool) -> None:
    """Send the session's turns one after the other, keeping how each ended in `live.outcomes`.

    Once the store has failed, the session sends nothing more: every send
    would fail the same way.
    """
    try:
        for n in range(first, first + turns):
            with lock:
                live.turn, live.doing = n - first + 1, "sending"
            outcome = _one_turn(host, setup, sid, workspace, n, live, lock)
            with lock:
                live.outcomes.append(outcome)
                live.doing = "completed" if outcome.ok else outcome.status
            if plain:
                said = f"completed ({outcome.requests} requests)" if outcome.ok else outcome.reason
                print(_console.printable(f"  {sid} turn {n} ({n - first + 1}/{turns} of this run): {said}"),
                      flush=True)
            if host.journal.failed is not None:
                break
    finally:
        with lock:
            live.done = True
            live.doing = "done" if not live.failed else f"done, {live.failed} not completed"


def _progress_table(lives: dict[str, Live], lock: threading.Lock, elapsed: float) -> Any:
    from rich.table import Table

    table = Table(title=f"cairn demo: {len(lives)} sessions ({elapsed:.1f} s)")
    for column in ("session", "turn", "now", "requests", "checkpoints", "streamed chars", "not completed"):
        table.add_column(column)
    with lock:
        for sid, live in lives.items():
            style = ("green" if not live.failed else "red") if live.done else ""
            table.add_row(*(_console.text(cell) for cell in (
                sid, f"{live.turn}/{live.of}", live.doing, live.requests, live.checkpoints, f"{live.chars:,}",
                live.failed)), style=style)
    return table


def _report_for(host: Host, sid: str) -> SessionReport:
    report = SessionReport(session=sid)
    reports = 0
    tokens = 0
    for record in host.journal.read(sid):
        event = record.event
        kind = record.line_kind
        if kind == "turn-started":
            report.turns += 1
        elif kind == "request":
            report.requests += 1
        elif kind == "assistant-message":
            report.responses += 1
        elif kind == "handoff":
            report.handoffs += 1
        elif kind == "provider-error":
            report.provider_errors += 1
        elif isinstance(event, Usage):
            figures = (event.total_tokens, event.prompt_tokens, event.completion_tokens)
            if any(figure is not None for figure in figures):
                reports += 1
                summed = (event.prompt_tokens or 0) + (event.completion_tokens or 0)
                tokens += max(event.total_tokens or 0, summed)
        elif isinstance(event, TurnFailed):
            report.failures.append(event.phase)
        elif isinstance(event, CheckpointCommitted):
            report.checkpoints.append({
                "seq": record.seq, "trigger": event.trigger, "strategy": event.strategy,
                "source_tokens": event.source_tokens, "replacement_tokens": event.replacement_tokens,
                "reduction": 1 - event.replacement_tokens / max(1, event.source_tokens),
            })
    report.tokens = tokens if reports or not report.responses else None
    report.responses_without_usage = max(0, report.responses - reports)
    return report


def _check_sessions(host: Host, sids: list[str], settings: SessionSettings) -> None:
    """A demo continues only sessions of the same model and window (settings come from the log)."""
    for sid in sids:
        if host.journal.last_seq(sid) == 0:
            continue
        info = host.state(sid).info
        wanted = (settings.model, settings.context_window)
        if info is not None and (info.model, info.context_window) != wanted:
            raise DemoSetupError(
                f"{sid} in {host.journal.root} runs model {info.model!r} with a window of "
                f"{info.context_window}, not {settings.model!r} with {settings.context_window}: "
                "use another --store"
            )


def _prepare_store(store: Path) -> None:
    """The store's directory, created when missing; DemoSetupError when the path cannot be one."""
    try:
        mode: int | None = store.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as error:  # a symlink loop, a file on the way, no permission
        raise DemoSetupError(f"--store {store}: {error.strerror or error}") from error
    if mode is not None and not stat.S_ISDIR(mode):
        raise DemoSetupError(f"--store {store} is not a directory")
    try:
        store.parent.mkdir(parents=True, exist_ok=True)
        private_dir(store)  # the store holds conversations: 0700, as the journal makes its own
    except OSError as error:
        raise DemoSetupError(f"--store {store}: {error.strerror or error}") from error


def run(store: Path, sessions: int, turns: int, *, show: bool, plain: bool,
        setup: Setup | None = None, fsync: FsyncFn = os.fsync) -> dict[str, Any]:
    """Run the demo; returns the report (see `main` for its use).

    Raises `DemoSetupError` when the demo cannot start on `store`, a
    `CairnError` of the store (`StoreLocked`: another process writes it) or
    `OSError`, and `DemoStoreFailed` when the store failed during the run.
    `fsync` is the disk sync the store uses (a seam for tests of a failing disk).
    """
    setup = setup if setup is not None else scripted_setup()
    settings = setup.settings
    started = time.perf_counter()
    sids = [f"demo-{n}" for n in range(1, sessions + 1)]
    spaces = store / "demo-workspaces"
    _prepare_store(store)
    host = Host.open(store, settings=settings, tools=WorkspaceTools(),
                     config=HostConfig(max_live_sessions=max(sessions, 8)),
                     provider_factory=setup.adapter_for, fsync=fsync)
    firsts: dict[str, int] = {}
    failed: Exception | None = None
    try:
        for n, sid in enumerate(sids, 1):
            make_workspace(spaces / sid, n)
        _check_sessions(host, sids, settings)
        for sid in sids:  # continue where the log ends: turns already run keep their numbers
            summary = host.journal.session(sid)
            firsts[sid] = (summary.counts.get("turn-started", 0) if summary is not None else 0) + 1
        continued = sum(1 for sid in sids if firsts[sid] > 1)
        lock = threading.Lock()
        lives = {sid: Live(of=turns) for sid in sids}
        threads = [
            threading.Thread(target=_client, name=f"demo-client-{sid}",
                             args=(host, setup, sid, spaces / sid, firsts[sid], turns, lives[sid], lock,
                                   plain))
            for sid in sids
        ]
        for thread in threads:
            thread.start()
        if show:
            from rich.console import Console
            from rich.live import Live as RichLive

            console = Console(stderr=True)
            with RichLive(console=console, refresh_per_second=8, transient=False) as view:
                while any(thread.is_alive() for thread in threads):
                    view.update(_progress_table(lives, lock, time.perf_counter() - started))
                    threads[0].join(0.125)
                view.update(_progress_table(lives, lock, time.perf_counter() - started))
        for thread in threads:
            thread.join()
        ran = time.perf_counter() - started
        failed = host.journal.failed
        if failed is None:
            live_states = {sid: host.state(sid) for sid in sids}
            live_requests = {sid: host.next_request(sid) for sid in sids}
    finally:
        host.close()  # stop: every actor, then the store
    outcomes = {sid: lives[sid].outcomes for sid in sids}
    if failed is not None:
        done = sum(outcome.ok for sid in sids for outcome in outcomes[sid])
        raise DemoStoreFailed(f"{failed}; {done} of {sessions * turns} turns completed before it")

    reopened = Host.open(store, settings=settings, tools=WorkspaceTools(), config=HostConfig(sweep=False),
                         provider_factory=setup.adapter_for, fsync=fsync)
    try:
        reports = []
        for sid in sids:
            report = _report_for(reopened, sid)
            report.replayed = (
                reopened.state(sid) == live_states[sid]
                and reopened.next_request(sid) == live_requests[sid]
                and reopened.journal.replay_full(sid) == live_states[sid]
            )
            report.sent = len(outcomes[sid])
            report.completed = sum(outcome.ok for outcome in outcomes[sid])
            report.problems = [{"turn": o.turn, "status": o.status, "phase": o.phase,
                                "error_class": o.error_class, "error": o.error, "reason": o.reason}
                               for o in outcomes[sid] if not o.ok]
            reports.append(report)
    finally:
        reopened.close()
    checkpoints = [c for r in reports for c in r.checkpoints]
    if setup.provider == "scripted":
        seen = {
            "hand-off": any(r.handoffs for r in reports),
            "LLM checkpoint": any(c["strategy"] == "llm" for c in checkpoints),
            "fallback checkpoint": any(c["strategy"] == "fallback" for c in checkpoints),
            "reactive recovery": any(c["trigger"] == "reactive" for c in checkpoints),
        }
    else:  # a real model decides what happens: only what the demo itself guarantees is required
        seen = {
            "hand-off band crossed by every session": all(r.crossed_handoff for r in reports),
            "compaction in every session": all(r.checkpoints for r in reports),
        }
    sent = sum(r.sent for r in reports)
    completed = sum(r.completed for r in reports)
    known = [r.tokens for r in reports if r.tokens is not None]
    unhealthy = []  # why the run did not do what it says (the module doc's three conditions)
    if completed < sessions * turns:
        unhealthy.append(f"{sessions * turns - completed} of {sessions * turns} turns did not complete")
    differ = [r.session for r in reports if not r.replayed]
    if differ:
        unhealthy.append(f"{', '.join(differ)} replayed to another state or request")
    missing = [name for name, ok in seen.items() if not ok]
    if missing:
        unhealthy.append(f"not seen: {', '.join(missing)}")
    return {
        "provider": setup.provider,
        "endpoint": setup.endpoint,
        "model": settings.model,
        "context_window": settings.context_window,
        "store": str(store),
        "sessions": sessions,
        "turns_per_session": turns,
        "continued_sessions": continued,
        "run_seconds": round(ran, 2),
        "total_seconds": round(time.perf_counter() - started, 2),
        "turns_sent": sent,
        "turns_completed": completed,
        "replayed_identically": sum(r.replayed for r in reports),
        "seen": seen,
        "observed": {
            "requests": sum(r.requests for r in reports),
            "provider tokens": sum(known) if known else None,
            "responses without usage": sum(r.responses_without_usage for r in reports),
            "hand-offs": sum(r.handoffs for r in reports),
            "sessions that crossed the hand-off band": sum(r.crossed_handoff for r in reports),
            "LLM checkpoints": sum(c["strategy"] == "llm" for c in checkpoints),
            "fallback checkpoints": sum(c["strategy"] == "fallback" for c in checkpoints),
            "reactive recoveries": sum(c["trigger"] == "reactive" for c in checkpoints),
            "failed turns": sum(len(r.failures) for r in reports),
            "provider errors": sum(r.provider_errors for r in reports),
        },
        "ok": not unhealthy,
        "unhealthy_because": unhealthy,
        "reports": [{**r.__dict__, "crossed_handoff": r.crossed_handoff} for r in reports],
    }


def _checkpoint_cell(checkpoints: list[dict[str, Any]]) -> str:
    if not checkpoints:
        return "-"
    return "\n".join(
        f"{c['trigger']}/{c['strategy']} {c['source_tokens']:,}->{c['replacement_tokens']:,} "
        f"({-c['reduction']:+.0%})" for c in checkpoints  # a change, signed: never "--22%"
    )


def _tokens_cell(report: dict[str, Any]) -> str:
    """Provider-reported tokens: `unknown` when no response reported usage, `≥` when some did not."""
    tokens = report["tokens"]
    if tokens is None:
        return "unknown"
    return f"≥{tokens:,}" if report["responses_without_usage"] else f"{tokens:,}"


def _figure(value: Any) -> str:
    return "unknown" if value is None else f"{value:,}"


def _turn_numbers(turns: list[int]) -> str:
    """`13`, `13-14`, `13, 15`: the turn numbers of one reason, runs collapsed."""
    runs: list[list[int]] = []
    for turn in sorted(turns):
        if runs and turn == runs[-1][-1] + 1:
            runs[-1].append(turn)
        else:
            runs.append([turn])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def problem_lines(report: dict[str, Any]) -> list[str]:
    """One line per session and reason for every turn of this run that did not complete."""
    lines: list[str] = []
    for r in report["reports"]:
        by_reason: dict[str, list[int]] = {}
        for problem in r["problems"]:
            by_reason.setdefault(problem["reason"], []).append(problem["turn"])
        for reason, turns in by_reason.items():
            which = f"turn {turns[0]}" if len(turns) == 1 else f"turns {_turn_numbers(turns)}"
            lines.append(f"{r['session']} {which}: {reason}")
    return lines


def render(report: dict[str, Any]) -> None:
    from rich.table import Table

    console = _console.console()

    def say(line: str = "", style: str = "") -> None:  # never parsed as markup: it may quote the log
        console.print(_console.text(line, style), soft_wrap=True)  # one line: the terminal wraps it

    table = Table(title="sessions (from the log, after reopening the store)")
    for column in ("session", "turns", "this run", "requests", "tokens", "hand-offs",
                   "checkpoints (reduction)", "failures", "replay"):
        table.add_column(column)
    for r in report["reports"]:
        failures = ", ".join(r["failures"]) or "-"
        if r["provider_errors"]:
            failures += f" ({r['provider_errors']} provider errors)"
        this_run = f"{r['completed']}/{r['sent']} completed"
        table.add_row(
            *(_console.text(cell) for cell in (r["session"], r["turns"])),
            _console.text(this_run, "" if r["completed"] == r["sent"] else "red"),
            *(_console.text(cell) for cell in (r["requests"], _tokens_cell(r), r["handoffs"])),
            Text("\n".join(map(_console.printable, _checkpoint_cell(r["checkpoints"]).split("\n")))),
            _console.text(failures),
            _console.text("identical", "green") if r["replayed"] else _console.text("DIFFERS", "red"),
        )
    console.print(table)
    if any(r["tokens"] is None or r["responses_without_usage"] for r in report["reports"]):
        say("tokens: as the provider reported them; unknown: it reported no usage, ≥: some responses "
            "came without usage")
    if report.get("provider") == "openai":
        observed = ", ".join(f"{name} {_figure(value)}" for name, value in report["observed"].items())
        say(f"Endpoint {report['endpoint']}, model {report['model']}, context window "
            f"{report['context_window']:,}: {observed}.")
    if report.get("placement") == "one-cpu":
        say(f"The host's threads ran on CPU {report['cpu']}, batch-scheduled (CAIRN_CPU=off leaves "
            "them to the OS).")
    elif report.get("placement") == "batch":
        say("The host's threads were batch-scheduled on every CPU (CAIRN_CPU=batch).")
    seen = ", ".join(f"{name} {'yes' if ok else 'NO'}" for name, ok in report["seen"].items())
    say(
        f"{report['sessions']} sessions x {report['turns_per_session']} turns in {report['run_seconds']} s"
        f" ({report['continued_sessions']} continued from an earlier run): {report['turns_completed']} of "
        f"{report['turns_sent']} turns completed; reopened the store: "
        f"{report['replayed_identically']}/{report['sessions']} sessions replayed to the same state "
        f"and next request. Seen: {seen}."
    )
    problems = problem_lines(report)
    if problems:
        say("Turns of this run that did not complete:", "red")
        for line in problems:
            say(f"  {line}")
    openai = report.get("provider") == "openai"
    if not all(report["seen"].values()) and openai:
        say(
            "Not every session crossed the hand-off band and compacted: run more turns (--turns), or a "
            "smaller CAIRN_CONTEXT_WINDOW; the table shows what each session did."
        )
    elif not all(report["seen"].values()):
        say(
            f"Not everything was seen: the fallback happens in demo-{FALLBACK_SESSION}, the reactive "
            f"recovery in demo-{REACTIVE_SESSION}, and the first compactions after about 6 turns; "
            "run with the defaults (8 sessions, 12 turns) to see them all."
        )
    if report["ok"]:
        say("The run is healthy.", "green")
    else:
        say(f"The run is NOT healthy: {'; '.join(report['unhealthy_because'])}.", "red")
    store = shlex.quote(report["store"])
    fallback = f"demo-{FALLBACK_SESSION}"
    reactive = f"demo-{REACTIVE_SESSION}"
    present = {r["session"] for r in report["reports"]}
    if openai or fallback not in present:  # no injected fault there: the first session will do
        fallback = "demo-1"
    if openai or reactive not in present:
        reactive = "demo-1"
    say()
    say("Audit what happened:")
    for command in audit_commands(store, fallback, reactive):
        say(f"  {command}")


def audit_commands(store: str, fallback: str = f"demo-{FALLBACK_SESSION}",
                   reactive: str = f"demo-{REACTIVE_SESSION}") -> list[str]:
    """The `cairn` commands the demo prints to audit its store (`store` quoted for a shell)."""
    return [
        f"cairn sessions --store {store}",
        f"cairn checkpoints {fallback} --store {store}",
        f"cairn log {fallback} --store {store} --kind compaction-failed --kind checkpoint-committed",
        f"cairn log {reactive} --store {store} --kind provider-error --kind checkpoint-committed",
        f"cairn log demo-1 --store {store} --kind handoff --kind context-slimmed",
        f"cairn context demo-1 --store {store}",
        f"cairn replay demo-1 --store {store}",
        f"cairn verify --store {store}",
    ]


class HeldLogs(logging.Handler):
    """Log records of the run (cairn's warnings, pykka's errors), held back from the live view.

    Once the run is over they are shown one line each, without tracebacks, and
    alike ones (the same message template) once with a count. Installed on the
    root logger for the run only.
    """

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def __enter__(self) -> HeldLogs:
        logging.getLogger().addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger().removeHandler(self)

    def lines(self) -> list[str]:
        alike: dict[tuple[str, object], list[logging.LogRecord]] = {}
        for record in self.records:
            alike.setdefault((record.name, record.msg), []).append(record)
        lines = []
        for group in alike.values():
            first = group[0]
            line = first.getMessage()
            if first.exc_info and first.exc_info[1] is not None:
                line += f" ({type(first.exc_info[1]).__name__}: {first.exc_info[1]})"
            line = line.removeprefix("cairn: ") if line.startswith("cairn: ") else f"{first.name}: {line}"
            lines.append(line + (f" (and {len(group) - 1} more like it)" if len(group) > 1 else ""))
        return lines


def _error(error: BaseException, store: str = "") -> None:
    """The one line the demo ends with when it could not run (exit 2)."""
    message = str(error) or type(error).__name__
    if isinstance(error, OSError):
        where = f": {error.filename}" if error.filename else f" (the store at {store})" if store else ""
        message = f"{error.strerror or type(error).__name__}{where}"
    elif isinstance(error, CairnError):
        message = f"{type(error).__name__}: {error}"
    elif isinstance(error, lmdb.Error):  # the index's disk failed where the store let LMDB's error through
        message = f"the index of the store failed: {type(error).__name__}: {error}"
    print(f"cairn demo: {_console.printable(message)}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cairn demo", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--store", default=os.environ.get("CAIRN_STORE", "./cairn-data"),
                        help="store directory (default: $CAIRN_STORE or ./cairn-data)")
    parser.add_argument("--sessions", type=int, default=DEFAULT_SESSIONS, help="concurrent sessions (8)")
    parser.add_argument("--turns", type=int, default=DEFAULT_TURNS, help="turns per session this run (12)")
    parser.add_argument("--provider", choices=("scripted", "openai"), default="scripted",
                        help="scripted (offline, the default) or openai: the endpoint of the CAIRN_* "
                        "variables (CAIRN_BASE_URL, CAIRN_API_KEY, CAIRN_MODEL, CAIRN_CONTEXT_WINDOW)")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    args = parser.parse_args(argv)
    if args.sessions < 1 or args.turns < 1:
        parser.error("--sessions and --turns must be at least 1")
    try:
        placed = placement.place_from_env()  # a host's threads on one CPU, unless CAIRN_CPU says otherwise
        setup = openai_setup() if args.provider == "openai" else scripted_setup()
    except (ProviderConfigError, DemoSetupError, placement.PlacementError) as error:
        _error(error)
        return 2
    interactive = sys.stderr.isatty() and not args.json
    try:
        with HeldLogs() as held:
            report = run(Path(args.store), args.sessions, args.turns, show=interactive,
                         plain=not interactive and not args.json, setup=setup)
    except (DemoSetupError, DemoStoreFailed, CairnError, OSError, lmdb.Error) as error:
        _error(error, args.store)  # one line; what was logged meanwhile follows from it
        return 2
    finally:
        setup.close()
    report["placement"], report["cpu"] = placed.mode, placed.cpu
    report["warnings"] = held.lines()
    for line in report["warnings"]:
        print(f"cairn demo: warning: {_console.printable(line)}", file=sys.stderr)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        render(report)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
