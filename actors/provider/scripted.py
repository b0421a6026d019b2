"""The scripted provider: a deterministic, offline adapter for the demo and the tests.

It answers each request with the next planned outcome of its purpose
(`turns`, `summaries`), else of the shared plan, or, when those are used
up, with its responder's answer (if one is set) or its default
(`Auto`): for a summary request (`purpose == "summary"`) an `<analysis>`
then a `<summary>` with the seven ledger headings built from the transcript
in the prompt; for a turn, a short fixed text. Outcomes:

| outcome          | what the request gets                                          |
|------------------|----------------------------------------------------------------|
| `Reply(...)`     | reasoning, text, tool calls and usage, streamed in that order  |
| `Fail(...)`      | a `ProviderFailure` (status, class, retryable) before any output |
| `FailAfter(...)` | some text streamed, then the failure (output already delivered) |
| `Auto()`         | the default answer for the request's purpose                   |

Beyond the plan:

- `context_window`: a request whose prompt tokens (the same estimate the
  usage reports) exceed it fails with a context-limit error before any
  output, as a real endpoint would; planned failures still come first.
- `responder(request)`: consulted when the plan is empty; returns an outcome,
  or None for the default. The demo's agent is one.
- `summary_format`: `ledger` (the default answer above) or `free-text`: a
  model that ignores the summary contract and answers a summary request
  with a paragraph and none of the seven headings (`free_text_summary`);
  the compactor must refuse it (C7) and fall back.
- `chunk_chars`: text is streamed in deltas of that many chars (0: one delta).
- `prompt_tokens(request)`: how prompt tokens are estimated (default: about
  four chars a token, `estimate_prompt_tokens`).
- `prompt_cache`: the model keeps a prompt cache, as Anthropic's does
  (`ScriptedCache`): each request writes the prefixes that end at its
  breakpoints (the end of the system messages, and each index of
  `request.cache_breakpoints`), reads the longest prefix an earlier request
  wrote, and its estimated usage reports both (`cached_prompt_tokens`,
  `cache_write_tokens`; `prompt_tokens` is still the whole prompt).

Every request is kept in `requests` (unless `keep_requests=False`), so
tests see what was sent. Thread-safe: the plan and the request list are
guarded by a lock.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Literal

import msgspec

from cairn.actors.provider.base import (
    Finished,
    ProviderFailure,
    ProviderOutput,
    ProviderRequest,
    Purpose,
    ReasoningDelta,
    TextDelta,
    ToolCallReady,
    UsageReport,
    is_retryable_status,
)
from cairn.events.kinds import ErrorClass
from cairn.events.model import Message, ToolCall, text_of
from cairn.events.protocol import HEADINGS, RECORD_PREFIX


class Reply(msgspec.Struct, frozen=True, kw_only=True):
    """A planned answer: `reasoning`, `text`, then `tool_calls` (`ToolCall(id, name, arguments_json)`).

    The host runs each tool call with its executor and sends the results
    back in the next request, which the plan's next outcome answers.
    `usage=None` means: estimate it from the request and the text.
    """

    text: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: UsageReport | None = None
    finish_reason: str = "stop"


class Fail(msgspec.Struct, frozen=True, kw_only=True):
    """A planned failure, raised as a `ProviderFailure` before any output."""

    error_class: ErrorClass
    message: str
    status_code: int | None = None
    retryable: bool = False
    #: the server's hint of when to try again, in ms (as `Retry-After` would give it)
    retry_after_ms: int | None = None

    def failure(self) -> ProviderFailure:
        return ProviderFailure(
            self.error_class,
            self.message,
            status_code=self.status_code,
            retryable=self.retryable,
            retry_after_ms=self.retry_after_ms,
        )


class FailAfter(msgspec.Struct, frozen=True, kw_only=True):
    """Stream `text` (and `reasoning`), then raise `failure`: an error after output (R2)."""

    failure: Fail
    text: str = "Partial answer"
    reasoning: str = ""


class Auto(msgspec.Struct, frozen=True):
    """The default answer for the request's purpose."""


#: what a scripted request gets
Outcome = Reply | Fail | FailAfter | Auto
#: asked for an outcome when the plan is used up: the request in, an outcome (None: the default) out
Responder = Callable[[ProviderRequest], Outcome | None]
#: how the default answer to a summary request is shaped (see the module doc)
SummaryFormat = Literal["ledger", "free-text"]


def empty_reply() -> Reply:
    return Reply(text="")


def http_error(status: int, message: str = "", *, retry_after_ms: int | None = None) -> Fail:
    """A failure as an HTTP API reports it: 429 rate-limit, 5xx server, 413 context limit, ...

    `retry_after_ms`: the server's hint of when to try again (its `Retry-After`).
    """
    error_class: ErrorClass
    if status == 413:
        error_class = "context-limit"
    elif status == 429:
        error_class = "rate-limit"
    elif status >= 500:
        error_class = "server"
    elif status in (401, 403):
        error_class = "auth"
    else:
        error_class = "bad-request"
    return Fail(
        error_class=error_class,
        message=message or f"HTTP {status}",
        status_code=status,
        retryable=is_retryable_status(status),
        retry_after_ms=retry_after_ms,
    )


def context_limit(message: str = "prompt is too long: maximum context length exceeded") -> Fail:
    """A failure as an endpoint reports a prompt over the context window (the session compacts, R1)."""
    return Fail(error_class="context-limit", message=message, status_code=400)


def network_error(message: str = "connection reset by peer") -> Fail:
    """A dropped connection before any output: retryable, as a real network error is."""
    return Fail(error_class="network", message=message, retryable=True)


class ScriptedProvider:
    """A `Provider` that follows a plan of outcomes, then its responder, then its default."""

    def __init__(
        self,
        plan: Iterable[Outcome] = (),
        *,
        turns: Iterable[Outcome] = (),
        summaries: Iterable[Outcome] = (),
        default: Outcome | None = None,
        responder: Responder | None = None,
        context_window: int | None = None,
        chunk_chars: int = 0,
        prompt_tokens: Callable[[ProviderRequest], int] | None = None,
        keep_requests: bool = True,
        summary_format: SummaryFormat = "ledger",
        prompt_cache: bool = False,
    ) -> None:
        self._plan: deque[Outcome] = deque(plan)
        self._plans: dict[str, deque[Outcome]] = {"turn": deque(turns), "summary": deque(summaries)}
        self._default: Outcome = default if default is not None else Auto()
        self._responder = responder
        self.context_window = context_window
        self.chunk_chars = chunk_chars
        self.summary_format: SummaryFormat = summary_format
        self._prompt_tokens = prompt_tokens if prompt_tokens is not None else estimate_prompt_tokens
        self._keep_requests = keep_requests
        self.cache = ScriptedCache() if prompt_cache else None
        self._calls = 0
        self._lock = threading.Lock()
        self.requests: list[ProviderRequest] = []

    def script(self, *outcomes: Outcome, purpose: Purpose | None = None) -> ScriptedProvider:
        """Append outcomes to the plan (of one purpose only, if given); returns self."""
        with self._lock:
            (self._plan if purpose is None else self._plans[purpose]).extend(outcomes)
        return self

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._plan) + sum(len(plan) for plan in self._plans.values())

    @property
    def calls(self) -> int:
        with self._lock:
            return self._calls

    def stream(self, request: ProviderRequest) -> Iterator[ProviderOutput]:
        with self._lock:
            self._calls += 1
            if self._keep_requests:
                self.requests.append(request)
            own = self._plans[request.purpose]
            outcome: Outcome | None = own.popleft() if own else self._plan.popleft() if self._plan else None
        if outcome is None and self._responder is not None:
            outcome = self._responder(request)
        if outcome is None:
            outcome = self._default
        if isinstance(outcome, Fail):
            raise outcome.failure()
        prompt = self._prompt_tokens(request)
        if self.context_window is not None and prompt > self.context_window:
            raise context_limit(
                f"prompt is too long: {prompt} tokens > {self.context_window} maximum context length"
            ).failure()
        if isinstance(outcome, FailAfter):
            return self._emit_then_fail(outcome)
        reply = outcome if isinstance(outcome, Reply) else self._auto(request)
        return self._emit(request, reply, prompt)

    def _auto(self, request: ProviderRequest) -> Reply:
        if request.purpose == "summary":
            if self.summary_format == "free-text":
                return Reply(text=free_text_summary(request.messages))
            return Reply(text=scripted_summary(request.messages))
        return Reply(text="Done.")

    def _chunks(self, text: str) -> Iterator[str]:
        size = self.chunk_chars
        if size <= 0 or len(text) <= size:
            yield text
            return
        for start in range(0, len(text), size):
            yield text[start : start + size]

    def _emit(self, request: ProviderRequest, reply: Reply, prompt: int) -> Iterator[ProviderOutput]:
        if reply.reasoning:
            for piece in self._chunks(reply.reasoning):
                yield ReasoningDelta(piece)
        if reply.text:
            for piece in self._chunks(reply.text):
                yield TextDelta(piece)
        for call in reply.tool_calls:
            yield ToolCallReady(call)
        usage = reply.usage if reply.usage is not None else _usage(prompt, reply)
        if reply.usage is None and self.cache is not None:
            reads, writes = self.cache.lookup(request, self._prompt_tokens)
            usage = msgspec.structs.replace(usage, cached_prompt_tokens=reads, cache_write_tokens=writes)
        yield usage
        yield Finished(reply.finish_reason)

    def _emit_then_fail(self, outcome: FailAfter) -> Iterator[ProviderOutput]:
        if outcome.reasoning:
            yield ReasoningDelta(outcome.reasoning)
        for piece in self._chunks(outcome.text):
            yield TextDelta(piece)
        failure = outcome.failure.failure()
        failure.output_delivered = True
        raise failure


class ScriptedCache:
    """The scripted model's prompt cache: prefixes of earlier requests, by digest. Thread-safe.

    A prefix is the model, the tool schemas and the first n messages. A
    request's breakpoints are the end of its leading system messages (the
    tools alone when there are none) and each index in `cache_breakpoints`.
    It reads the longest cached prefix that ends at or before its last
    breakpoint (a real cache looks back only some blocks from each
    breakpoint; this one looks back all the way), writes what lies between
    that and its last breakpoint, and caches every breakpoint's prefix. No
    expiry.
    """

    def __init__(self) -> None:
        self._prefixes: set[bytes] = set()
        self._lock = threading.Lock()

    def lookup(self, request: ProviderRequest, count: Callable[[ProviderRequest], int]) -> tuple[int, int]:
        """(tokens read from the cache, tokens written to it) for `request`, counted by `count`."""
        messages = request.messages
        system = 0
        while system < len(messages) and messages[system].role == "system":
            system += 1
        points = sorted({system, *(i + 1 for i in request.cache_breakpoints if 0 <= i < len(messages))})
        last = points[-1]
        digest = hashlib.sha256(msgspec.json.encode((request.model, request.tools)))
        digests = [digest.digest()]
        for message in messages[:last]:
            digest.update(msgspec.json.encode(message))
            digests.append(digest.digest())
        with self._lock:
            read = max((n for n in range(last + 1) if digests[n] in self._prefixes), default=None)
            self._prefixes.update(digests[n] for n in points)

        def tokens(n: int) -> int:
            return count(msgspec.structs.replace(request, messages=messages[:n]))

        reads = tokens(read) if read is not None else 0
        return reads, max(0, tokens(last) - reads)


def estimate_prompt_tokens(request: ProviderRequest) -> int:
    """The scripted model's prompt tokens: about four chars a token, plus 4 a message."""
    prompt = sum(4 + len(text_of(m)) // 4 for m in request.messages)
    return prompt + sum(len(schema) // 4 for schema in request.tools)


def _usage(prompt: int, reply: Reply) -> UsageReport:
    completion = (len(reply.text) + len(reply.reasoning)) // 4
    completion += sum(len(c.arguments) // 4 + 4 for c in reply.tool_calls)
    return UsageReport(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)


# --- the deterministic summary -------------------------------------------

_ENTRY_RE = re.compile(r"^\[(\d+)\] (system|user|assistant|tool): ?(.*)$")
_LINE_CHARS = 160
_PER_SECTION = 3
_MUTATION_WORDS = ("wrote", "write", "edited", "edit", "created", "modified", "patched", "deleted", "renamed")
_CHECK_WORDS = ("passed", "failed", "ok", "tests", "pytest", "assert", "exit code", "verified")
_RISK_WORDS = ("error", "fail", "traceback", "blocked", "denied", "timeout", "warning")


def _entries(transcript: str) -> list[tuple[str, str]]:
    entries: list[tuple[str, str]] = []
    for line in transcript.splitlines():
        match = _ENTRY_RE.match(line)
        if match is not None:
            entries.append((match.group(2), match.group(3)))
        elif entries and line and not line.startswith(("Write the <analysis>", "### ", "Recently accessed")):
            role, text = entries[-1]
            entries[-1] = (role, f"{text}\n{line}")
    return entries


def _first_line(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(RECORD_PREFIX) and not line.startswith("[earlier]"):
            return line[:_LINE_CHARS]
    return ""


def _matching(entries: list[tuple[str, str]], roles: tuple[str, ...], words: tuple[str, ...]) -> list[str]:
    found: list[str] = []
    for role, text in reversed(entries):
        if role not in roles:
            continue
        for line in text.splitlines():
            lowered = line.lower()
            if any(word in lowered for word in words) and not line.startswith(RECORD_PREFIX):
                found.append(line.strip()[:_LINE_CHARS])
                break
        if len(found) >= _PER_SECTION:
            break
    return list(reversed(found))


def scripted_summary(messages: Iterable[Message]) -> str:
    """The scripted model's answer to a summary prompt: analysis, then the seven headings."""
    transcript = "\n".join(text_of(m) for m in messages if m.role == "user")
    entries = _entries(transcript)
    users = [t for r, t in entries if r == "user" and _first_line(t)]
    assistants = [t for r, t in entries if r == "assistant" and _first_line(t)]
    records = [
        line.strip()
        for _, text in entries
        for line in text.splitlines()
        if line.strip().startswith(RECORD_PREFIX)
    ]
    sections: dict[str, list[str]] = {h: [] for h in HEADINGS}
    if users:
        sections[HEADINGS[0]].append(f"- First request: {_first_line(users[0])}")
        if len(users) > 1:
            sections[HEADINGS[0]].append(f"- Latest request: {_first_line(users[-1])}")
    sections[HEADINGS[1]] = [f"- {_first_line(t)}" for t in assistants[-_PER_SECTION:]]
    sections[HEADINGS[2]] = [f"- {line}" for line in _matching(entries, ("tool",), _MUTATION_WORDS)]
    sections[HEADINGS[3]] = [f"- {line}" for line in _matching(entries, ("tool",), _CHECK_WORDS)]
    if users:
        sections[HEADINGS[4]].append(f"- Working on: {_first_line(users[-1])}")
    sections[HEADINGS[5]] = [f"- {line}" for line in _matching(entries, ("tool", "assistant"), _RISK_WORDS)]
    if assistants:
        sections[HEADINGS[6]].append(f"- Continue from: {_first_line(assistants[-1])}")
    # A careless model: records restated under the last heading, whatever their own.
    sections[HEADINGS[6]].extend(f"- Also noted: {record}" for record in records)
    body = "\n\n".join(
        f"## {heading}\n" + ("\n".join(lines) if lines else "- No evidence observed.")
        for heading, lines in sections.items()
    )
    analysis = (
        f"<analysis>\nThe transcript has {len(entries)} messages: {len(users)} from the user, "
        f"{len(assistants)} from the assistant with text, {len(records)} exact records.\n</analysis>"
    )
    return f"{analysis}\n\n<summary>\n{body}\n</summary>"


def free_text_summary(messages: Iterable[Message]) -> str:
    """A careless model's answer to a summary prompt: one paragraph, none of the seven headings."""
    transcript = "\n".join(text_of(m) for m in messages if m.role == "user")
    entries = _entries(transcript)
    users = [t for r, t in entries if r == "user" and _first_line(t)]
    latest = _first_line(users[-1]) if users else "the task"
    return (
        f"Sure! The conversation so far covered {len(entries)} messages. The user is working on: "
        f"{latest}. Things are going well; just keep going from where we left off."
    )
