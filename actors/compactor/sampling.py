"""Summary sampling (C5, C6): at most three model calls, retries with injected sleep, shrink on overflow.

| outcome of a call (`summary_call.ask`)  | class         | next                                          |
|-----------------------------------------|---------------|-----------------------------------------------|
| a reply with all seven ledger headings  | `Summary`     | success                                       |
| an empty reply (blank summary)          | `Blank`       | retry after the next delay (`_plan_wait`)     |
| a reply missing a ledger heading (C7)   | `Malformed`   | fail `malformed` at once                      |
| retryable error (429 408 409 5xx, net)  | `Transient`   | retry after the next delay (`_plan_wait`)     |
| ... with a `Retry-After` over the cap   | `Transient`   | fail `error` at once, the detail says so      |
| context-limit error                     | `Overflow`    | shrink one step (C6, `_shrink`), no wait      |
| ... on the third call, or none smaller  | `Overflow`    | fail `overflow` (context-exhausted)           |
| any other error                         | `Fatal`       | fail `error` at once                          |
| the adapter raises something else       | `Fatal`       | fail `error` at once, its message redacted    |
| the third call retryable or blank       |               | fail with its reason (`error`, `empty`)       |
| JSON asked, the reply not a ledger (1)  | `Malformed`   | fail `malformed` at once, the precise reason  |
| JSON asked under `auto`, HTTP 400/422   | `Fatal`       | the endpoint refuses it: ask in text at once  |
| a `length` finish under the cap (2)     | `Overflow`    | shrink one step (C6), no wait                 |

Before the first call (beyond C6, `_fit`): where the window is known, the
call asks for at most `summary_output_room` tokens (C5's 8,000, the
session's output cap, and a third of the window, at least 256), and the
prompt is shrunk by C6's steps until its tokens, with 30 % more for the
server's own tokenizer, leave that room in the window. Each such step is
recorded as `fit:<step>` among the reductions. In a window of 100,000
tokens nothing changes; in one of 2,048 (a small local model) a summary of a
source at 80 % of it would otherwise fill the window before the reply could
begin. The JSON ledger's bounds follow the room too
(`structured.bounds_for`), and a window of at most 8,192 tokens gets C7's
contract in short (`prompt.compact_instructions`, recorded as
`fit:compact-instructions`).

(1) Beyond C7 (`structured`): where the provider's `structured_summary`
is `auto` or `on`, the call asks for the ledger as a JSON object under
`structured.ledger_schema`; the reply (a forced tool call's arguments on
Anthropic) is rendered by the host (`render_ledger`) and must hold all seven
fields, each a list of strings. Not JSON (cut by the output limit or not),
not an object, a field missing or of another type: `malformed`, with the
reason. Under `auto`, an endpoint that answers the structured request with
HTTP 400 or 422 is told so (`refuse_structured`: the adapter remembers it)
and the same call is made at once in the text protocol; it counts as one of
the three calls.
(2) Beyond C6: a reply that ends with finish reason `length` after fewer
output tokens than the call asked for was cut by the context window, not by
its own cap (a server such as llama.cpp's fills the window with prompt and
reply and stops there, with no error): as for a context-limit error, the
prompt shrinks one step and the call is made again.

The delay before a retry is C5's 375 ms then 750 ms (the policy's
schedule, `RETRY_DELAYS_MS` by default), or longer when the server said so
on a 429 or 503 (`Retry-After`, `retry-after-ms`; with jitter, at most the
policy's cap): see `actors.provider.retry`. A reply
that is not empty but lacks any of the seven headings is not retried: the
same prompt at temperature 0 would get the same shape back, and the
fallback is the honest answer (the breaker counts it, C4).

Calls go out at temperature 0 with a bounded output (8,000 tokens) and
`purpose="summary"`, which tells adapters to turn their SDK's own retries off.
The sleep and the jitter's random draw are injected so tests never wait; the
delays asked for, and the server's hint behind each, are recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import msgspec

from cairn.actors.compactor.prompt import (
    COMPACT_PROMPT_WINDOW,
    PromptFile,
    PromptShape,
    build_prompt,
    next_shape,
    prompt_chars,
)
from cairn.actors.compactor.structured import (
    LEDGER_NAME,
    bounds_for,
    schema_json,
)
from cairn.actors.compactor.summary_call import (
    Blank,
    Fatal,
    Malformed,
    Overflow,
    Summary,
    Transient,
    ask,
)
from cairn.actors.provider.base import (
    Provider,
    ProviderRequest,
    StructuredCapable,
    StructuredOutput,
    structured_mode,
)
from cairn.actors.provider.retry import RETRY_DELAYS_MS, RetryDecision, RetryPolicy, decide_retry
from cairn.actors.tokens import TokenCounter
from cairn.events.kinds import FailureReason
from cairn.events.model import Message

MAX_CALLS = 3
SUMMARY_MAX_OUTPUT_TOKENS = 8000
#: the least output a summary call asks for when the window is known (beyond C5)
MIN_SUMMARY_ROOM = 256
#: (beyond C6) prompt tokens as counted here, plus this share, must leave the room in the window
TOKENIZER_MARGIN_PERCENT = 30

__all__ = ["MAX_CALLS", "RETRY_DELAYS_MS", "SUMMARY_MAX_OUTPUT_TOKENS", "Sampled", "Sleep", "sample_summary"]

Sleep = Callable[[float], None]
Draw = Callable[[], float]


class Sampled(msgspec.Struct, frozen=True, kw_only=True):
    """The result of sampling: the raw text on success, the failure reason otherwise."""

    raw_text: str | None
    failure: FailureReason | None = None
    detail: str = ""
    calls: int = 0
    reductions: tuple[str, ...] = ()
    delays_ms: tuple[int, ...] = ()
    #: the server's hint behind each delay (None: it gave none, or not on a 429/503)
    hints_ms: tuple[int | None, ...] = ()
    prompt_chars: tuple[int, ...] = ()
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    files_sent: bool = True
    #: whether the last call asked for the JSON ledger (`raw_text` is then that JSON)
    structured: bool = False
    #: why the endpoint refused the JSON ledger under `auto`, when it did in this sampling
    structured_refused: str = ""


class _Prompt(msgspec.Struct, frozen=True):
    """The summary prompt in its current C6 shape, and its size."""

    shape: PromptShape
    messages: tuple[Message, ...]
    chars: int
    #: whether the restored files are in it (there are some, and C6 has not dropped them)
    files_sent: bool
    #: whether it asks for the JSON ledger (`structured`)
    structured: bool
    #: the most output tokens the call asks for (`summary_output_room`)
    room: int
    #: whether it carries the compact instructions of a small window
    compact: bool = False


@dataclass
class _Tally:
    """What one sampling has done so far: the calls, their sizes and cost, the waits and shrinks."""

    calls: int = 0
    sizes: list[int] = field(default_factory=list)
    reductions: list[str] = field(default_factory=list)
    delays: list[int] = field(default_factory=list)
    hints: list[int | None] = field(default_factory=list)
    usage: list[int] = field(default_factory=lambda: [0, 0, 0])
    #: the last call's failure and its detail: the result when the calls run out
    last: tuple[FailureReason, str] = ("empty", "")
    #: why the endpoint refused the JSON ledger, when it did
    refused: str = ""

    def result(self, raw: str | None, reason: FailureReason | None, detail: str, prompt: _Prompt) -> Sampled:
        return Sampled(
            raw_text=raw,
            failure=reason,
            detail=detail,
            calls=self.calls,
            reductions=tuple(self.reductions),
            delays_ms=tuple(self.delays),
            hints_ms=tuple(self.hints),
            prompt_chars=tuple(self.sizes),
            prompt_tokens=self.usage[0],
            completion_tokens=self.usage[1],
            total_tokens=self.usage[2],
            files_sent=prompt.files_sent,
            structured=prompt.structured,
            structured_refused=self.refused,
        )


def summary_output_room(context_window: int | None, output_cap: int | None) -> int:
    """The output a summary call asks for: C5's 8,000 at most, the session's output cap (which the
    adapters apply anyway), and a third of a known window, at least `MIN_SUMMARY_ROOM`."""
    room = SUMMARY_MAX_OUTPUT_TOKENS
    if isinstance(output_cap, int) and not isinstance(output_cap, bool) and output_cap > 0:
        room = min(room, output_cap)
    if isinstance(context_window, int) and not isinstance(context_window, bool) and context_window > 0:
        room = min(room, max(MIN_SUMMARY_ROOM, context_window // 3))
    return room


def sample_summary(
    provider: Provider,
    *,
    model: str,
    source: Sequence[Message],
    files: Sequence[PromptFile],
    sleep: Sleep,
    request_id: str = "",
    timeout_s: float | None = None,
    retry: RetryPolicy | None = None,
    draw: Draw | None = None,
    context_window: int | None = None,
    output_cap: int | None = None,
    counter: TokenCounter | None = None,
) -> Sampled:
    # long: the match is the module's table, one arm per outcome of a call
    """C5/C6: ask the model for the summary of `source`; never more than three calls (the table above).

    `retry` is the wait policy (default: C5's schedule, a 60 s cap); `draw`
    gives the jitter's number in [0, 1) (default 0: no jitter).
    `context_window`, `output_cap` and `counter` size the first prompt and
    the reply (`_fit`); without a window or a counter the prompt is not fitted.
    """
    policy = retry if retry is not None else RetryPolicy()
    mode = structured_mode(provider)
    room = summary_output_room(context_window, output_cap)
    prompt = _prompt(source, files, PromptShape(), structured=mode != "off", room=room)
    tally = _Tally()
    prompt = _fit(source, files, prompt, context_window, counter, tally)
    wait_ms: int | None = None  # the wait before the next call; None: send it at once

    while tally.calls < MAX_CALLS:
        if wait_ms is not None:
            sleep(wait_ms / 1000)
            wait_ms = None
        tally.calls += 1
        tally.sizes.append(prompt.chars)
        call_id = f"{request_id}:{tally.calls}" if request_id else ""
        match ask(provider, _request(model, prompt, timeout_s, call_id), tally.usage):
            case Summary(text=text):
                return tally.result(text, None, "", prompt)
            case Malformed(detail=detail):
                return tally.result(None, "malformed", detail, prompt)
            case Fatal(detail=detail, status=status) if (
                prompt.structured and mode == "auto" and status in (400, 422)
            ):
                tally.refused = detail
                tally.last = ("error", detail)
                if isinstance(provider, StructuredCapable):
                    provider.refuse_structured(detail)
                prompt = _prompt(
                    source, files, prompt.shape, structured=False, room=room, compact=prompt.compact
                )
            case Fatal(detail=detail):
                return tally.result(None, "error", detail, prompt)
            case Blank():
                tally.last = ("empty", "the reply had no summary")
                decision = _plan_wait(tally, None, None, draw, policy)
                wait_ms = decision.wait_ms if decision.retry else None
            case Overflow(detail=detail):
                tally.last = ("overflow", detail)
                shrunk = _shrink(source, files, prompt, tally.calls)
                if isinstance(shrunk, str):
                    return tally.result(None, "overflow", f"context-exhausted: {shrunk}", prompt)
                prompt, step = shrunk
                tally.reductions.append(step)
            case Transient(detail=detail, status=status, hint_ms=hint_ms):
                tally.last = ("error", detail)
                decision = _plan_wait(tally, status, hint_ms, draw, policy)
                if decision.note:
                    return tally.result(None, "error", f"{detail}; {decision.note}", prompt)
                wait_ms = decision.wait_ms if decision.retry else None
    return tally.result(None, *tally.last, prompt)


def _prompt(
    source: Sequence[Message],
    files: Sequence[PromptFile],
    shape: PromptShape,
    *,
    structured: bool,
    room: int,
    compact: bool = False,
) -> _Prompt:
    messages = build_prompt(source, files, shape, structured=structured, compact=compact)
    files_sent = shape.include_files and bool(files)
    return _Prompt(shape, messages, prompt_chars(messages), files_sent, structured, room, compact)


def _fit(
    source: Sequence[Message],
    files: Sequence[PromptFile],
    prompt: _Prompt,
    context_window: int | None,
    counter: TokenCounter | None,
    tally: _Tally,
) -> _Prompt:
    """Beyond C6: C6's steps, taken before the first call until the prompt leaves the reply's
    room in a known window (counted tokens plus `TOKENIZER_MARGIN_PERCENT`, 30 %: SmolLM2 counts
    1.07-1.30x what cl100k counts for the instructions, code and test logs); each step is
    `fit:<name>`, after `fit:compact-instructions` in a small window."""
    if counter is None or not isinstance(context_window, int) or context_window <= 0:
        return prompt
    if context_window <= COMPACT_PROMPT_WINDOW:
        prompt = _prompt(
            source, files, prompt.shape, structured=prompt.structured, room=prompt.room, compact=True
        )
        tally.reductions.append("fit:compact-instructions")
    limit = context_window - prompt.room
    while counter.messages(prompt.messages) * (100 + TOKENIZER_MARGIN_PERCENT) // 100 > limit:
        step = next_shape(source, files, prompt.shape)
        if step is None:
            break
        shape, name = step
        smaller = _prompt(
            source, files, shape, structured=prompt.structured, room=prompt.room, compact=prompt.compact
        )
        if smaller.chars >= prompt.chars:
            break
        prompt = smaller
        tally.reductions.append(f"fit:{name}")
    return prompt


def _request(model: str, prompt: _Prompt, timeout_s: float | None, request_id: str) -> ProviderRequest:
    """One summary call: temperature 0, a bounded output, `purpose="summary"` (no SDK retries)."""
    return ProviderRequest(
        model=model,
        messages=prompt.messages,
        purpose="summary",
        temperature=0.0,
        max_output_tokens=prompt.room,
        timeout_s=timeout_s,
        request_id=request_id,
        structured=StructuredOutput(LEDGER_NAME, schema_json(bounds_for(prompt.room)))
        if prompt.structured
        else None,
    )


def _plan_wait(
    tally: _Tally, status: int | None, hint_ms: int | None, draw: Draw | None, policy: RetryPolicy
) -> RetryDecision:
    """C5: the wait before the next call (`retry.decide_retry`), recorded in `tally` when there is one."""
    decision = decide_retry(
        len(tally.delays),
        transient=True,
        retries_left=MAX_CALLS - tally.calls,
        status=status,
        hint_ms=hint_ms,
        draw=draw() if draw is not None else 0.0,
        policy=policy,
    )
    if decision.retry:
        tally.delays.append(decision.wait_ms)
        tally.hints.append(decision.hint_ms)
    return decision


def _shrink(
    source: Sequence[Message], files: Sequence[PromptFile], prompt: _Prompt, calls: int
) -> tuple[_Prompt, str] | str:
    """C6: the prompt one step smaller and the step's name, or why it cannot be (context-exhausted)."""
    if calls >= MAX_CALLS:
        return "still over the limit after the last call"
    step = next_shape(source, files, prompt.shape)
    if step is None:
        return "nothing left to shrink"
    shape, name = step
    smaller = _prompt(
        source, files, shape, structured=prompt.structured, room=prompt.room, compact=prompt.compact
    )
    if smaller.chars >= prompt.chars:
        return f"{name} did not shrink the prompt"
    return smaller, name
