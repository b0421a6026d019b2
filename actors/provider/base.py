"""The provider interface: what a session or compactor asks a model, and what comes back.

An adapter turns a `ProviderRequest` into a stream of `ProviderOutput` items
and raises `ProviderFailure` for errors. The session's provider actor wraps
it for the turn loop; the compactor calls `complete` for summaries. Adapters
must be safe to call from the thread of the actor that owns them.

The contract, beyond the types:

- An adapter never retries or waits on its own (turn SDK retries off):
  cairn decides both (`actors.provider.retry`). It reports what the server
  said: the HTTP status, whether the error is transient (`retryable`), and
  the server's `Retry-After` / `retry-after-ms` as `retry_after_ms`, which
  cairn honours on 429, 503 and 529 (at most a capped wait, with jitter).
- A summary request (`purpose="summary"`, CONTEXT-RULES C5-C7) is answered
  like any other, as text. The model is asked for a private analysis, then a
  `<summary>` block that contains, as heading lines (`## Objective and
  constraints`; `**1. Objective and constraints:**` is read the same), the
  seven ledger headings of C7: `Objective and constraints`, `Decisions and
  rationale`, `Workspace mutations`, `Verification evidence`, `Active tasks
  and background work`, `Open risks or blockers`, `Exact next action`. A
  blank summary is retried (C5). A summary that lacks any of the seven
  headings is a failed summary (`compaction-failed`, reason `malformed`,
  counted by the breaker) and the deterministic fallback replaces the
  history instead; order and repeats are repaired by the host's rebuild.
- A structured summary request (`structured` set, beyond C7: see
  `actors.compactor.structured`) asks for one JSON object under the given
  JSON schema instead: the OpenAI-compatible adapter sends it as
  `response_format` (`json_schema`), the Anthropic one as a forced call of a
  tool with that schema, whose arguments are the reply. An adapter that can
  do this says so with `structured_summary` (`auto`, `on` or `off`; see
  `StructuredCapable`); one that says nothing is asked in text only.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from contextlib import closing
from typing import Literal, Protocol, runtime_checkable

import msgspec

from cairn.events.errors import CairnError
from cairn.events.kinds import ErrorClass
from cairn.events.model import Message, ReasoningBlock, ToolCall

Purpose = Literal["turn", "summary"]

#: R1: phrases that mark a context-limit error (matched case-insensitively); the last one is
#: beyond R1: llama.cpp's server says "request (N tokens) exceeds the available context size"
#: (type `exceed_context_size_error`, HTTP 400), and without it a summary prompt over a small
#: window fails at once instead of shrinking (C6)
CONTEXT_LIMIT_PHRASES = (
    "prompt_too_long",
    "prompt is too long",
    "maximum context length",
    "context length exceeded",
    "context_length_exceeded",
    "request too large",
    "exceeds the available context size",
)


#: whether summaries are asked for as a JSON object: try it (`auto`), always (`on`), never (`off`)
StructuredMode = Literal["auto", "on", "off"]
STRUCTURED_MODES: tuple[StructuredMode, ...] = ("auto", "on", "off")


class StructuredOutput(msgspec.Struct, frozen=True):
    """Ask for a reply that is one JSON object under `schema` (a JSON Schema, as canonical JSON)."""

    name: str
    schema: str


class ProviderRequest(msgspec.Struct, frozen=True, kw_only=True):
    model: str
    messages: tuple[Message, ...]
    #: tool schemas as canonical JSON strings
    tools: tuple[str, ...] = ()
    purpose: Purpose = "turn"
    temperature: float | None = None
    max_output_tokens: int | None = None
    timeout_s: float | None = None
    request_id: str = ""
    #: indexes into `messages` after which a provider with prompt caching may put a breakpoint
    cache_breakpoints: tuple[int, ...] = ()
    #: the reply as one JSON object under a schema (structured summaries), else free text
    structured: StructuredOutput | None = None


class TextDelta(msgspec.Struct, frozen=True):
    text: str


class ReasoningDelta(msgspec.Struct, frozen=True):
    text: str


class ToolCallReady(msgspec.Struct, frozen=True):
    call: ToolCall


class ReasoningBlockReady(msgspec.Struct, frozen=True):
    """A reasoning block, complete with what its provider needs to be sent it back (a signature).

    Its text was yielded before as `ReasoningDelta`s; the session keeps the block in the
    assistant message (`Message.reasoning_blocks`) and the adapter sends it back verbatim.
    """

    block: ReasoningBlock


class UsageReport(msgspec.Struct, frozen=True):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    cached_prompt_tokens: int | None = None
    cache_write_tokens: int | None = None


class Finished(msgspec.Struct, frozen=True):
    reason: str | None = None


ProviderOutput = TextDelta | ReasoningDelta | ToolCallReady | ReasoningBlockReady | UsageReport | Finished


class ProviderFailure(CairnError):
    """A provider call failed. Never carries credentials.

    `retryable` follows C5: rate limits (429), 408, 409, 5xx, timeouts and
    connection resets are retryable; everything else is not.
    `retry_after_ms` is the server's own hint of when to try again, in
    milliseconds (`retry-after-ms` or `Retry-After`, see `actors.provider.retry`),
    None when it sent none; cairn honours it on 429, 503 and 529.
    """

    def __init__(
        self,
        error_class: ErrorClass,
        message: str,
        *,
        status_code: int | None = None,
        retryable: bool = False,
        output_delivered: bool = False,
        retry_after_ms: int | None = None,
    ) -> None:
        self.error_class: ErrorClass = error_class
        self.status_code = status_code
        self.retryable = retryable
        self.output_delivered = output_delivered
        self.retry_after_ms = retry_after_ms
        super().__init__(f"{error_class}: {message}")
        self.detail = message


def is_context_limit(status_code: int | None, message: str) -> bool:
    """R1: HTTP 413, or a message with one of the context-limit phrases."""
    if status_code == 413:
        return True
    lowered = message.lower()
    return any(phrase in lowered for phrase in CONTEXT_LIMIT_PHRASES)


def is_retryable_status(status_code: int | None) -> bool:
    """C5: 429, 408, 409 and every 5xx are retryable."""
    return status_code is not None and (status_code in (408, 409, 429) or 500 <= status_code <= 599)


class Completion(msgspec.Struct, frozen=True, kw_only=True):
    text: str
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: UsageReport | None = None
    finish_reason: str | None = None


class Provider(Protocol):
    """What every adapter implements."""

    def stream(self, request: ProviderRequest) -> Iterator[ProviderOutput]:
        """Yield output as it arrives; raise ProviderFailure on error."""
        ...


@runtime_checkable
class StructuredCapable(Protocol):
    """An adapter that can ask its endpoint for a JSON reply under a schema (`ProviderRequest.structured`).

    `structured_summary` is the setting in force: `auto` until the endpoint
    refused a structured request (`refuse_structured`), then `off` for the
    adapter's life; `on` and `off` as configured.
    """

    @property
    def structured_summary(self) -> StructuredMode: ...

    def refuse_structured(self, detail: str) -> None:
        """The endpoint refused a structured request under `auto`: ask in text from now on."""
        ...


class StructuredSwitch:
    """An adapter's half of `StructuredCapable`: its configured mode and the memory of a refusal.

    Under `auto`, the first refusal turns structured requests off for the adapter's life (its
    endpoint does not change); `on` and `off` never change. Safe across threads: one assignment.
    """

    def __init__(self, configured: StructuredMode) -> None:
        self.configured: StructuredMode = configured
        #: what the endpoint said when it refused, None while it has not
        self.refused: str | None = None

    @property
    def mode(self) -> StructuredMode:
        return "off" if self.configured == "auto" and self.refused is not None else self.configured

    def refuse(self, detail: str) -> None:
        if self.configured == "auto":
            self.refused = detail


def structured_mode(provider: object) -> StructuredMode:
    """How summaries are asked of `provider`: its `structured_summary`, or `off` when it has none."""
    return provider.structured_summary if isinstance(provider, StructuredCapable) else "off"


class _Limits(Protocol):
    """What an adapter's configuration says of its endpoint's limits."""

    @property
    def context_window(self) -> int | None: ...

    @property
    def max_output_tokens(self) -> int | None: ...


class ConfiguredLimits:
    """An adapter's endpoint limits as configured (`CAIRN_CONTEXT_WINDOW`, `CAIRN_MAX_OUTPUT_TOKENS`),
    for `endpoint_window` and `endpoint_output_cap`: the OpenAI and Anthropic adapters mix it in."""

    _config: _Limits

    @property
    def context_window(self) -> int | None:
        """The window its endpoint serves, when configured: summary calls fit it."""
        return self._config.context_window

    @property
    def max_output_tokens(self) -> int | None:
        """The output cap configured for its endpoint, which every call keeps to: a summary call
        asks for no more, so that a reply stopped there is known as cut by it."""
        return self._config.max_output_tokens


def endpoint_window(provider: object) -> int | None:
    """The context window the provider's endpoint serves, when its adapter was told it
    (`ConfiguredLimits`: `CAIRN_CONTEXT_WINDOW`), else None. A summary call is fitted to the
    smaller of it and the session's window: a small local server's slot may hold less than the
    sessions it summarizes were started with."""
    return _positive_count(getattr(provider, "context_window", None))


def endpoint_output_cap(provider: object) -> int | None:
    """The output cap the provider's adapter applies to every call (`CAIRN_MAX_OUTPUT_TOKENS`), else
    None. A summary call asks for no more than it: a reply that stops at a cap the sampler did not
    know of would pass for one cut by the context window (`sampling._cut_by_window`)."""
    return _positive_count(getattr(provider, "max_output_tokens", None))


def _positive_count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def guarded(
    outputs: Callable[[], Generator[ProviderOutput, None, None]],
    failure_of: Callable[[Exception, bool], ProviderFailure | None],
) -> Iterator[ProviderOutput]:
    """An adapter's stream: `outputs()` opened on the first `next`, closed when left early, and an
    SDK error turned into `failure_of(error, delivered)` (R2: whether anything was yielded yet).
    An error `failure_of` does not know (None) is raised as it is. The failure is raised outside
    the handler, so the SDK's unscrubbed error is not chained to it."""
    delivered = False
    failure: ProviderFailure | None = None
    try:
        with closing(outputs()) as items:
            for item in items:
                delivered = delivered or carries_output(item)
                yield item
    except Exception as error:
        failure = failure_of(error, delivered)
        if failure is None:
            raise
    if failure is not None:
        raise failure


def carries_output(item: ProviderOutput) -> bool:
    """Whether an item is output in R2's sense: anything but a text or reasoning delta without text.

    SDK streams often open with an empty chunk; an adapter that passes it on must not cost the
    request its retries and its recovery (`delivered`), so an empty delta counts as nothing.
    """
    return not (isinstance(item, TextDelta | ReasoningDelta) and not item.text)


def complete(provider: Provider, request: ProviderRequest) -> Completion:
    """Run a request to the end and collect its output (summaries, tests)."""
    text: list[str] = []
    reasoning: list[str] = []
    calls: list[ToolCall] = []
    usage: UsageReport | None = None
    finish: str | None = None
    delivered = False
    try:
        for item in provider.stream(request):
            delivered = delivered or carries_output(item)
            match item:
                case TextDelta():
                    text.append(item.text)
                case ReasoningDelta():
                    reasoning.append(item.text)
                case ToolCallReady():
                    calls.append(item.call)
                case UsageReport():
                    usage = item
                case Finished():
                    finish = item.reason
    except ProviderFailure as failure:
        failure.output_delivered = failure.output_delivered or delivered
        raise
    return Completion(
        text="".join(text),
        reasoning="".join(reasoning),
        tool_calls=tuple(calls),
        usage=usage,
        finish_reason=finish,
    )
