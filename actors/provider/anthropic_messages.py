"""The Anthropic adapter: streaming Messages API calls through the official `anthropic` SDK.

The module is not named `anthropic.py` so that it can never shadow the SDK
it imports. It follows `openai_compat`'s contract (see `base`):

| purpose   | temperature   | output cap (`max_tokens`, always sent)  | thinking      | timeout              |
|-----------|---------------|-----------------------------------------|---------------|----------------------|
| `turn`    | the request's | request's, else configured, else 8,192  | configured    | request's, configured|
| `summary` | 0 (C5) (1)    | min(8,000, request's, configured) (C5)  | off           | request's, else 60 s |

(1) A temperature is sent only where the SDK's `messages.create` still
takes one: later SDKs (1.17 and 2.16 among them) dropped the sampling
parameters, and the API's default stands in for C5's 0 there. With extended thinking
enabled (`thinking_budget`), a turn is sent `thinking: {"type": "enabled",
"budget_tokens": N}`, with adaptive thinking `thinking: {"type": "adaptive"}`
(the model decides when and how much to think), and either way no
temperature (the API allows none with thinking); the thinking blocks come
back and are sent back alike. An effort (`CAIRN_EFFORT`) goes out on turns
as `output_config: {"effort": ...}`. Settings the installed SDK does not
define are refused when the provider is made (`ProviderConfigError`). A
request whose own cap is not above the budget gets the budget
cut to the cap less one token, and no thinking when that is under the API's
floor of 1,024: the cap is the session's output reserve, never exceeded. A
request that carries the tool results of an assistant turn with no signed
thinking (recorded under another provider) goes without thinking, since the
API wants that turn to start with thinking blocks it never had.

A structured request (`ProviderRequest.structured`, the JSON ledger of
`actors.compactor.structured`) goes out with one more tool, named and shaped
by it, and `tool_choice` forcing a call of it: the call's arguments are the
JSON reply (the Messages API has no `response_format`).

The messages, system prompt, tools and cache breakpoints are built by
`anthropic_request`; the events are read by `anthropic_stream`; errors are
classed by `anthropic_errors`.

The SDK's own retries are off (`max_retries=0`): cairn decides retries. The
timeout bounds connecting and each wait for the next bytes of the stream,
so a stalled stream fails after it as a retryable `network` failure. Errors
are raised as `ProviderFailure` with `output_delivered` true once anything
was yielded (R2). The request goes out when the returned iterator is first
advanced; closing the iterator early closes the HTTP response.

The key goes in the SDK's authentication header (`x-api-key`, or
`Authorization: Bearer` in later SDKs) and nowhere else: it is given to the
SDK explicitly (a key-less local server gets a placeholder), so the SDK never
reads a key, token or profile of its own from the environment or the disk;
it is kept out of every repr and scrubbed from every failure. One provider
may be used from several threads at once.
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from types import TracebackType
from typing import Any, cast

import anthropic

from cairn.actors.provider.anthropic_config import MIN_THINKING_BUDGET, AnthropicConfig
from cairn.actors.provider.anthropic_errors import to_failure
from cairn.actors.provider.anthropic_request import ToolSchemaError, to_anthropic_body
from cairn.actors.provider.anthropic_stream import EventAssembler, MalformedChunk
from cairn.actors.provider.base import (
    ConfiguredLimits,
    ProviderFailure,
    ProviderOutput,
    ProviderRequest,
    StructuredMode,
    StructuredSwitch,
    guarded,
)
from cairn.actors.provider.chat_errors import scrubber
from cairn.actors.provider.config import NO_KEY, ProviderConfigError
from cairn.events.model import Message

#: C5: the summary call's bounds
SUMMARY_TEMPERATURE = 0.0
SUMMARY_MAX_OUTPUT_TOKENS = 8000
SUMMARY_TIMEOUT_S = 60.0


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class AnthropicProvider(ConfiguredLimits):
    """A `Provider` on Anthropic's Messages API (or a server that speaks it)."""

    _config: AnthropicConfig

    def __init__(self, config: AnthropicConfig, *, clock_ms: Callable[[], int] | None = None) -> None:
        """`clock_ms`: the clock a `Retry-After` date is read against (default: the wall clock)."""
        _check_sdk_takes(config)
        self._config = config
        self._clock_ms = clock_ms if clock_ms is not None else _wall_ms
        self._scrub = scrubber(config.api_key)
        self._structured = StructuredSwitch(config.structured_summary)
        self._client = anthropic.Anthropic(
            api_key=config.api_key if config.api_key is not None else NO_KEY,
            base_url=config.base_url,
            max_retries=0,
            timeout=config.timeout_s,
        )
        # older SDKs (0.75) read ANTHROPIC_AUTH_TOKEN even beside an explicit key, and would send it
        # as a bearer token to whatever server this is: the key given is the only credential
        self._client.auth_token = None
        #: whether the SDK's API still takes a temperature (later SDKs dropped sampling parameters)
        self._temperature = "temperature" in inspect.signature(self._client.messages.create).parameters

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **settings: Any) -> AnthropicProvider:
        """A provider from the settings given and the `CAIRN_*` environment (see `config`).

        Raises `ProviderConfigError` naming the setting that is missing or malformed.
        """
        return cls(AnthropicConfig.from_env(environ, **settings))

    @property
    def config(self) -> AnthropicConfig:
        return self._config

    @property
    def api_key(self) -> str | None:
        """The key, for the provider actor to redact from what it keeps (`redact.adapter_secrets`)."""
        return self._config.api_key

    @property
    def structured_summary(self) -> StructuredMode:
        """`StructuredCapable`: the configured mode, `off` once the endpoint refused it under `auto`."""
        return self._structured.mode

    def refuse_structured(self, detail: str) -> None:
        """The endpoint refused the forced ledger tool under `auto`: summaries go as text from now on."""
        self._structured.refuse(detail)

    def __repr__(self) -> str:
        return f"AnthropicProvider(model={self._config.model!r}, endpoint={self._config.endpoint!r})"

    def close(self) -> None:
        """Close the HTTP client's connections. Streams still open fail as `network`."""
        self._client.close()

    def __enter__(self) -> AnthropicProvider:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    # --- a request -------------------------------------------------------

    def arguments(self, request: ProviderRequest) -> tuple[dict[str, Any], float]:
        """The SDK arguments of `request` (see the module table) and its timeout.

        Raises `ProviderFailure` (`bad-request`) for a tool schema that is not a JSON object.
        """
        config = self._config
        summary = request.purpose == "summary"
        try:
            body = to_anthropic_body(
                request.messages,
                request.tools,
                cache_breakpoints=request.cache_breakpoints,
                caching=config.prompt_caching,
            )
        except ToolSchemaError as error:
            raise ProviderFailure("bad-request", str(error)) from None
        cap, mode, budget = self._cap_and_thinking(request, summary)
        arguments: dict[str, Any] = {
            "model": request.model or config.model,
            "messages": body.messages,
            "max_tokens": cap,
        }
        if body.system:
            arguments["system"] = body.system
        if body.tools:
            arguments["tools"] = body.tools
        if request.structured is not None:
            arguments["tools"] = [
                *body.tools,
                {
                    "name": request.structured.name,
                    "description": "Record the summary: one list of short lines per field.",
                    "input_schema": json.loads(request.structured.schema),
                },
            ]
            arguments["tool_choice"] = {"type": "tool", "name": request.structured.name}
        if mode == "enabled":
            arguments["thinking"] = {"type": "enabled", "budget_tokens": budget}
        elif mode == "adaptive":
            arguments["thinking"] = {"type": "adaptive"}
        elif self._temperature:
            temperature = SUMMARY_TEMPERATURE if summary else request.temperature
            if temperature is not None:
                arguments["temperature"] = temperature
        if config.effort is not None and not summary:
            arguments["output_config"] = {"effort": config.effort}
        if request.timeout_s is not None:
            timeout = request.timeout_s
        else:
            timeout = SUMMARY_TIMEOUT_S if summary else config.timeout_s
        return arguments, timeout

    def _cap_and_thinking(self, request: ProviderRequest, summary: bool) -> tuple[int, str, int | None]:
        """The output cap of `request`, and its thinking mode and budget (kept below the cap)."""
        config = self._config
        mode: str = config.thinking_mode if not summary else "off"
        if mode != "off" and _continues_an_unsigned_tool_turn(request.messages):
            mode = "off"  # the API wants such a turn to start with signed thinking it never had
        budget = config.thinking_budget
        if summary:
            given = [c for c in (request.max_output_tokens, config.max_output_tokens) if c is not None]
            cap = min([*given, SUMMARY_MAX_OUTPUT_TOKENS])
        else:
            cap = request.max_output_tokens if request.max_output_tokens is not None else config.output_cap
            if mode == "enabled" and budget is not None and budget >= cap:  # it must stay below the cap
                budget = cap - 1
                mode = "enabled" if budget >= MIN_THINKING_BUDGET else "off"
        return cap, mode, budget

    def stream(self, request: ProviderRequest) -> Iterator[ProviderOutput]:
        arguments, timeout = self.arguments(request)
        return self._run(arguments, timeout)

    def _failure(self, error: Exception, timeout: float, delivered: bool) -> ProviderFailure | None:
        return to_failure(
            error,
            scrub=self._scrub,
            endpoint=self._config.endpoint,
            timeout_s=timeout,
            output_delivered=delivered,
            now_ms=self._clock_ms(),
        )

    def _run(self, arguments: dict[str, Any], timeout: float) -> Iterator[ProviderOutput]:
        return guarded(
            lambda: self._outputs(arguments, timeout),
            lambda error, delivered: self._failure(error, timeout, delivered),
        )

    def _outputs(self, arguments: dict[str, Any], timeout: float) -> Generator[ProviderOutput, None, None]:
        assembler = EventAssembler()
        create = cast(Any, self._client.messages.create)
        stream = create(**arguments, stream=True, timeout=timeout)
        try:
            for event in stream:
                yield from assembler.feed(event)
            content_type = str(stream.response.headers.get("content-type", ""))
            if not assembler.events and "json" in content_type.lower():
                raise MalformedChunk("the server answered with JSON, not an event stream: does it stream?")
            yield from assembler.end()
        finally:
            stream.close()


def _sdk_version() -> str:
    return str(getattr(anthropic, "__version__", "?"))


def _check_sdk_takes(config: AnthropicConfig) -> None:
    """`ProviderConfigError` for a setting the installed SDK does not define (older SDKs lack
    adaptive thinking and `output_config`): refused when the provider is made, not at the first turn."""
    if config.thinking_mode == "adaptive" and not hasattr(anthropic.types, "ThinkingConfigAdaptiveParam"):
        raise ProviderConfigError(
            "CAIRN_THINKING",
            f"adaptive thinking is not in the installed anthropic SDK ({_sdk_version()}): upgrade it, "
            "or set CAIRN_THINKING=enabled with CAIRN_THINKING_BUDGET",
        )
    create = anthropic.resources.Messages.create
    if config.effort is not None and "output_config" not in inspect.signature(create).parameters:
        raise ProviderConfigError(
            "CAIRN_EFFORT",
            f"the installed anthropic SDK ({_sdk_version()}) sends no output_config: upgrade it, "
            "or unset CAIRN_EFFORT",
        )


def _continues_an_unsigned_tool_turn(messages: tuple[Message, ...]) -> bool:
    """Whether the newest assistant message called tools without signed thinking to send back.

    With thinking on, the Messages API wants the assistant turn whose tool
    results a request carries to start with its thinking blocks, as the model
    signed them. A turn recorded under another provider (or before thinking
    was switched on) has none, and no thinking may be invented for it, so
    such a request goes without thinking; the next turn has it again.
    """
    for message in reversed(messages):
        if message.role == "assistant":
            return bool(message.tool_calls) and not message.reasoning_blocks
    return False
