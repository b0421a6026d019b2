"""Settings of the provider adapters (OpenAI-compatible and Anthropic), from arguments or the environment.

`CAIRN_PROVIDER` picks the adapter (`provider_kind`): `openai` (the default)
or `anthropic`. The OpenAI-compatible adapter's settings:

| setting        | argument            | environment (first set wins)        | default                     |
|----------------|---------------------|-------------------------------------|-----------------------------|
| endpoint       | `base_url`          | `CAIRN_BASE_URL`, `OPENAI_BASE_URL` | `https://api.openai.com/v1` |
| API key        | `api_key`           | `CAIRN_API_KEY`, `OPENAI_API_KEY`   | none (required for OpenAI)  |
| model          | `model`             | `CAIRN_MODEL`                       | none: required              |
| context window | `context_window`    | `CAIRN_CONTEXT_WINDOW`              | none (the host decides)     |
| output cap     | `max_output_tokens` | `CAIRN_MAX_OUTPUT_TOKENS`           | none (the server decides)   |
| turn timeout   | `timeout_s`         | `CAIRN_TIMEOUT_S`                   | 600 s                       |
| JSON summaries | `structured_summary`| `CAIRN_STRUCTURED_SUMMARY` (5)      | `auto`                      |

An argument always wins over the environment; an empty variable counts as
unset. `OPENAI_API_KEY` is only read for the endpoint it belongs to: OpenAI's
own, or the one `OPENAI_BASE_URL` names. A key meant for OpenAI is never
sent to another server named by `CAIRN_BASE_URL` or `base_url`.

A missing or malformed setting raises `ProviderConfigError`, which names the
setting and the variable, never the key's value. The key is kept out of
`repr` (and so out of logs and tracebacks that print the config).

The summary call's own limits (C5: 60 s, 8,000 output tokens) are not
settings; see `openai_compat`.

(5) Beyond C7 (`actors.compactor.structured`): `on` asks for each summary
as a JSON object with one field per ledger heading (OpenAI-compatible:
`response_format` with a JSON schema; Anthropic: a forced tool call), and
the host writes the headings; `off` asks for the headings in free text;
`auto` (the default) asks for JSON until the endpoint refuses such a request
(HTTP 400 or 422), then in text for as long as the provider lives.

The Anthropic adapter's settings, and their footnotes (1)-(4), are in
`anthropic_config`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple
from urllib.parse import urlsplit

from cairn.actors.provider.base import STRUCTURED_MODES, StructuredMode
from cairn.events.errors import InputError

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_TIMEOUT_S = 600.0

ENV_BASE_URL = ("CAIRN_BASE_URL",)
ENV_API_KEY = ("CAIRN_API_KEY",)
ENV_OPENAI_BASE_URL = ("OPENAI_BASE_URL",)
ENV_OPENAI_API_KEY = ("OPENAI_API_KEY",)
ENV_MODEL = ("CAIRN_MODEL",)
ENV_CONTEXT_WINDOW = ("CAIRN_CONTEXT_WINDOW",)
ENV_MAX_OUTPUT_TOKENS = ("CAIRN_MAX_OUTPUT_TOKENS",)
ENV_TIMEOUT_S = ("CAIRN_TIMEOUT_S",)
ENV_PROVIDER = ("CAIRN_PROVIDER",)
ENV_STRUCTURED_SUMMARY = ("CAIRN_STRUCTURED_SUMMARY",)


#: the adapters `CAIRN_PROVIDER` can name
ProviderKind = Literal["openai", "anthropic"]
PROVIDER_KINDS: tuple[ProviderKind, ...] = ("openai", "anthropic")

#: the request field that carries the output cap; newer OpenAI models want the second
OutputCapField = Literal["max_tokens", "max_completion_tokens"]

#: sent as the bearer token when a non-OpenAI endpoint is used without a key
NO_KEY = "no-key"


class ProviderConfigError(InputError):
    """A provider setting is missing or malformed. `setting` names it (e.g. `CAIRN_MODEL`)."""

    def __init__(self, setting: str, message: str) -> None:
        self.setting = setting
        super().__init__(f"{setting}: {message}")


def provider_kind(environ: Mapping[str, str] | None = None) -> ProviderKind:
    """The adapter `CAIRN_PROVIDER` names (`openai` when unset). Raises `ProviderConfigError` otherwise."""
    env = os.environ if environ is None else environ
    raw = env_value(env, ENV_PROVIDER)
    if raw is None:
        return "openai"
    for kind in PROVIDER_KINDS:
        if raw.lower() == kind:
            return kind
    raise ProviderConfigError("CAIRN_PROVIDER", f"must be one of {', '.join(PROVIDER_KINDS)}, got {raw!r}")


def _is_openai_host(base_url: str) -> bool:
    host = urlsplit(base_url).hostname or ""
    return host == "api.openai.com" or host.endswith(".openai.com")


def redact_url(url: str) -> str:
    """The URL without user info or query (either could carry a credential)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return f"{parts.scheme}://{host}{parts.path}"


@dataclass(frozen=True, kw_only=True)
class OpenAIConfig:
    """Validated settings of one OpenAI-compatible endpoint. Immutable, safe to share."""

    model: str
    base_url: str = DEFAULT_BASE_URL
    api_key: str | None = field(default=None, repr=False)
    context_window: int | None = None
    max_output_tokens: int | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    output_cap_field: OutputCapField = "max_tokens"
    #: summaries as a JSON object (`response_format`): auto, on or off (see the module doc, (5))
    structured_summary: StructuredMode = "auto"

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model.strip():
            raise ProviderConfigError(
                "CAIRN_MODEL", "no model is set: pass model= or set CAIRN_MODEL to the served model's name"
            )
        parts = urlsplit(self.base_url) if isinstance(self.base_url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise ProviderConfigError(
                "CAIRN_BASE_URL",
                "must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:8000/v1",
            )
        if self.api_key is not None and (
            not isinstance(self.api_key, str) or not self.api_key or any(c.isspace() for c in self.api_key)
        ):
            raise ProviderConfigError("CAIRN_API_KEY", "must be a non-empty string without whitespace")
        if self.api_key is None and _is_openai_host(self.base_url):
            raise ProviderConfigError(
                "CAIRN_API_KEY", f"no API key is set for {redact_url(self.base_url)}: set CAIRN_API_KEY"
            )
        check_positive_int("CAIRN_CONTEXT_WINDOW", self.context_window)
        check_positive_int("CAIRN_MAX_OUTPUT_TOKENS", self.max_output_tokens)
        if (
            self.context_window is not None
            and self.max_output_tokens is not None
            and self.max_output_tokens >= self.context_window
        ):
            raise ProviderConfigError(
                "CAIRN_MAX_OUTPUT_TOKENS",
                f"the output cap ({self.max_output_tokens}) must be below the context window "
                f"({self.context_window})",
            )
        if (
            isinstance(self.timeout_s, bool)
            or not isinstance(self.timeout_s, int | float)
            or not math.isfinite(self.timeout_s)
            or self.timeout_s <= 0
        ):
            raise ProviderConfigError(
                "CAIRN_TIMEOUT_S", f"must be a positive number of seconds, got {self.timeout_s!r}"
            )
        check_structured(self.structured_summary)
        if self.output_cap_field not in ("max_tokens", "max_completion_tokens"):
            raise ProviderConfigError(
                "output_cap_field",
                f"must be 'max_tokens' or 'max_completion_tokens', got {self.output_cap_field!r}",
            )

    @property
    def endpoint(self) -> str:
        """The base URL as it may be shown (no user info, no query)."""
        return redact_url(self.base_url)

    @property
    def bearer(self) -> str:
        """The token the client sends: the key, or a placeholder for key-less local servers."""
        return self.api_key if self.api_key is not None else NO_KEY

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
    ) -> OpenAIConfig:
        """Settings from the arguments given, the rest from `environ` (default `os.environ`)."""
        env = os.environ if environ is None else environ
        given = Given(
            model, base_url, api_key, context_window, max_output_tokens, timeout_s, structured_summary
        )
        common = common_settings(
            env, given, ENV_OPENAI_BASE_URL, DEFAULT_BASE_URL, ENV_OPENAI_API_KEY, _is_openai_host
        )
        return cls(**common, output_cap_field=output_cap_field)


class Given(NamedTuple):
    """The settings a `from_env` caller gave (None: read the environment)."""

    model: str | None
    base_url: str | None
    api_key: str | None
    context_window: int | None
    max_output_tokens: int | None
    timeout_s: float | None
    structured_summary: StructuredMode | None = None


def common_settings(
    env: Mapping[str, str],
    given: Given,
    vendor_url_env: tuple[str, ...],
    vendor_url: str,
    vendor_key_env: tuple[str, ...],
    is_vendor_host: Callable[[str], bool],
) -> dict[str, Any]:
    """The settings every adapter has, from `given` else `env`. The vendor's own key variable
    (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`) is read only for the vendor's own host (its default
    URL, its URL variable, or a URL on its domain), so it never goes to another server."""
    url = given.base_url if given.base_url is not None else env_value(env, ENV_BASE_URL)
    own_url = url is None
    if url is None:
        url = env_value(env, vendor_url_env) or vendor_url
    key = given.api_key if given.api_key is not None else env_value(env, ENV_API_KEY)
    if key is None and (own_url or is_vendor_host(url)):
        key = env_value(env, vendor_key_env)
    window, cap, timeout = given.context_window, given.max_output_tokens, given.timeout_s
    return {
        "model": given.model if given.model is not None else env_value(env, ENV_MODEL) or "",
        "base_url": url,
        "api_key": key,
        "context_window": window if window is not None else env_int(env, ENV_CONTEXT_WINDOW),
        "max_output_tokens": cap if cap is not None else env_int(env, ENV_MAX_OUTPUT_TOKENS),
        "timeout_s": timeout if timeout is not None else env_float(env, ENV_TIMEOUT_S, DEFAULT_TIMEOUT_S),
        "structured_summary": given.structured_summary
        if given.structured_summary is not None
        else env_lower(env, ENV_STRUCTURED_SUMMARY) or "auto",
    }


def check_structured(value: object) -> None:
    if value not in STRUCTURED_MODES:
        raise ProviderConfigError(
            "CAIRN_STRUCTURED_SUMMARY", f"must be one of {', '.join(STRUCTURED_MODES)}, got {value!r}"
        )


def check_positive_int(setting: str, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ProviderConfigError(setting, f"must be a positive whole number of tokens, got {value!r}")


def env_value(env: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    for name in names:
        value = env.get(name, "").strip()
        if value:
            return value
    return None


def env_int(env: Mapping[str, str], names: tuple[str, ...]) -> int | None:
    raw = env_value(env, names)
    if raw is None:
        return None
    try:
        value = int(raw.replace("_", ""))
    except ValueError:
        raise ProviderConfigError(names[0], f"must be a positive whole number, got {raw!r}") from None
    if value <= 0:
        raise ProviderConfigError(names[0], f"must be a positive whole number, got {raw!r}")
    return value


def env_float(env: Mapping[str, str], names: tuple[str, ...], default: float) -> float:
    raw = env_value(env, names)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ProviderConfigError(names[0], f"must be a positive number of seconds, got {raw!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise ProviderConfigError(names[0], f"must be a positive number of seconds, got {raw!r}")
    return value


def check_common(
    *, model: object, base_url: object, api_key: object, context_window: object, max_output_tokens: object
) -> None:
    """The checks both adapters' settings share: model, URL, key shape, window and cap."""
    if not isinstance(model, str) or not model.strip():
        raise ProviderConfigError(
            "CAIRN_MODEL", "no model is set: pass model= or set CAIRN_MODEL to the served model's name"
        )
    parts = urlsplit(base_url) if isinstance(base_url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ProviderConfigError(
            "CAIRN_BASE_URL", "must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:8000"
        )
    if api_key is not None and (
        not isinstance(api_key, str) or not api_key or any(c.isspace() for c in api_key)
    ):
        raise ProviderConfigError("CAIRN_API_KEY", "must be a non-empty string without whitespace")
    check_positive_int("CAIRN_CONTEXT_WINDOW", context_window)
    check_positive_int("CAIRN_MAX_OUTPUT_TOKENS", max_output_tokens)
    if (
        isinstance(context_window, int)
        and isinstance(max_output_tokens, int)
        and max_output_tokens >= context_window
    ):
        raise ProviderConfigError(
            "CAIRN_MAX_OUTPUT_TOKENS",
            f"the output cap ({max_output_tokens}) must be below the context window ({context_window})",
        )


def check_timeout(value: object) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ProviderConfigError("CAIRN_TIMEOUT_S", f"must be a positive number of seconds, got {value!r}")


def env_lower(env: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    raw = env_value(env, names)
    return None if raw is None else raw.lower()
