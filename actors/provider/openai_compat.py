"""The OpenAI-compatible adapter: streaming chat completions through the official `openai` SDK.

Any endpoint that speaks the chat-completions protocol works (OpenAI, vLLM,
llama.cpp, Ollama, LiteLLM, ...). The module is not named `openai.py` so that
it can never shadow the SDK it imports.

Per request:

| purpose   | temperature   | output cap                             | timeout                          |
|-----------|---------------|----------------------------------------|----------------------------------|
| `turn`    | the request's | the request's, else the configured cap | the request's, else configured   |
| `summary` | 0 (C5)        | min(8,000, request's, configured) (C5) | the request's, else 60 s (C5)    |

A structured request (`ProviderRequest.structured`, the JSON ledger of
`actors.compactor.structured`) goes out with `response_format: {"type":
"json_schema", "json_schema": {"name", "strict": false, "schema"}}`, which
vLLM and llama.cpp's server enforce (llama.cpp through a grammar, bounds
included) and OpenAI follows (not strict: its strict mode refuses the
schema's `maxLength`); the host checks the reply either way.

Every call streams with `stream_options.include_usage`; the SDK's own
retries are off (`max_retries=0`) for every call, since cairn decides
retries (C5 for summaries, R2/R3 for turns). The timeout bounds connecting
and each wait for the next bytes of the stream, so a stalled stream fails
after it as a retryable `network` failure.

Output (see `chat_stream`): text, reasoning, each tool call once complete
(at the finish reason), then exactly one `UsageReport` (fields None when the
server sent no usage) and `Finished`. Errors (see `chat_errors`) are raised
as `ProviderFailure` with `output_delivered` true once anything was yielded
(R2); an HTTP error carries the server's `Retry-After` / `retry-after-ms`
hint (`retry_after_ms`, a date read against the injected `clock_ms`). The
adapter never waits or retries itself. The request goes out when the
returned iterator is first advanced;
closing the iterator early closes the HTTP response.

Thread-safety: one provider may be used from several threads at once; each
call has its own stream state and the SDK's HTTP client is thread-safe.
The API key never appears in a repr, a failure or anything yielded.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Generator, Iterator, Mapping
from types import TracebackType
from typing import Any, cast

import openai

from cairn.actors.provider.base import (
    ConfiguredLimits,
    ProviderFailure,
    ProviderOutput,
    ProviderRequest,
    StructuredMode,
    StructuredSwitch,
    guarded,
)
from cairn.actors.provider.chat_errors import scrubber, to_failure
from cairn.actors.provider.chat_messages import ToolSchemaError, to_chat_messages, to_chat_tools
from cairn.actors.provider.chat_stream import ChunkAssembler, MalformedChunk
from cairn.actors.provider.config import OpenAIConfig, OutputCapField

#: C5: the summary call's bounds
SUMMARY_TEMPERATURE = 0.0
SUMMARY_MAX_OUTPUT_TOKENS = 8000
SUMMARY_TIMEOUT_S = 60.0


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _new_call_id(position: int) -> str:
    """An id for a tool call the server sent without one."""
    return f"call_{uuid.uuid4().hex[:24]}"


class OpenAIProvider(ConfiguredLimits):
    """A `Provider` on an OpenAI-compatible chat-completions endpoint."""

    _config: OpenAIConfig

    def __init__(self, config: OpenAIConfig, *, clock_ms: Callable[[], int] | None = None) -> None:
        """`clock_ms`: the clock a `Retry-After` date is read against (default: the wall clock)."""
        self._config = config
        self._clock_ms = clock_ms if clock_ms is not None else _wall_ms
        self._scrub = scrubber(config.api_key)
        self._structured = StructuredSwitch(config.structured_summary)
        self._client = openai.OpenAI(
            api_key=config.bearer,
            base_url=config.base_url,
            max_retries=0,
            timeout=config.timeout_s,
        )

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        context_window: int | None = None,
        max_output_tokens: int | None = None,
        timeout_s: float | None = None,
        output_cap_field: OutputCapField = "max_tokens",
        structured_summary: StructuredMode | None = None,
    ) -> OpenAIProvider:
        """A provider from the arguments given and the `CAIRN_*` environment (see `config`).

        Raises `ProviderConfigError` naming the setting that is missing or malformed.
        """
        return cls(
            OpenAIConfig.from_env(
                environ,
                model=model,
                base_url=base_url,
                api_key=api_key,
                context_window=context_window,
                max_output_tokens=max_output_tokens,
                timeout_s=timeout_s,
                output_cap_field=output_cap_field,
                structured_summary=structured_summary,
            )
        )

    @property
    def config(self) -> OpenAIConfig:
        return self._config

    @property
    def structured_summary(self) -> StructuredMode:
        """`StructuredCapable`: the configured mode, `off` once the endpoint refused it under `auto`."""
        return self._structured.mode

    def refuse_structured(self, detail: str) -> None:
        """The endpoint refused `response_format` under `auto`: summaries go as text from now on."""
        self._structured.refuse(detail)

    def __repr__(self) -> str:
        return f"OpenAIProvider(model={self._config.model!r}, endpoint={self._config.endpoint!r})"

    def close(self) -> None:
        """Close the HTTP client's connections. Streams still open fail as `network`."""
        self._client.close()

    def __enter__(self) -> OpenAIProvider:
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
        arguments: dict[str, Any] = {
            "model": request.model or config.model,
            "messages": to_chat_messages(request.messages),
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            try:
                arguments["tools"] = to_chat_tools(request.tools)
            except ToolSchemaError as error:
                raise ProviderFailure("bad-request", str(error)) from None
        if request.structured is not None:
            arguments["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": request.structured.name,
                    # not strict: OpenAI's strict mode refuses a schema with `maxLength`, which
                    # llama.cpp's and vLLM's grammars enforce (and a small model needs, see
                    # `structured.bounds_for`); the host checks the reply itself
                    "strict": False,
                    "schema": json.loads(request.structured.schema),
                },
            }
        temperature = SUMMARY_TEMPERATURE if summary else request.temperature
        if temperature is not None:
            arguments["temperature"] = temperature
        caps = [request.max_output_tokens, config.max_output_tokens]
        if summary:
            caps.append(SUMMARY_MAX_OUTPUT_TOKENS)
        given = [cap for cap in caps if cap is not None]
        if given:
            cap = min(given) if summary else given[0]
            if config.output_cap_field == "max_tokens":
                arguments["max_tokens"] = cap
            else:  # through the body: SDKs before 1.45 lack the keyword
                arguments["extra_body"] = {"max_completion_tokens": cap}
        if request.timeout_s is not None:
            timeout = request.timeout_s
        else:
            timeout = SUMMARY_TIMEOUT_S if summary else config.timeout_s
        return arguments, timeout

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
        assembler = ChunkAssembler(_new_call_id)
        create = cast(Any, self._client.chat.completions.create)
        stream = create(**arguments, stream=True, timeout=timeout)
        try:
            chunks = 0
            for chunk in stream:
                chunks += 1
                yield from assembler.feed(chunk)
            content_type = str(stream.response.headers.get("content-type", ""))
            if not chunks and "json" in content_type.lower():
                raise MalformedChunk("the server answered with JSON, not an event stream: does it stream?")
            yield from assembler.end()
        finally:
            stream.close()


def provider_from_env(environ: Mapping[str, str] | None = None, **overrides: Any) -> OpenAIProvider:
    """`OpenAIProvider.from_env`, as a plain function for hosts and the CLI."""
    return OpenAIProvider.from_env(environ, **overrides)
