"""Settings of the Anthropic Messages adapter, from arguments or the environment.

`AnthropicConfig`, read by `anthropic_messages`; the rules of `config` apply:

| setting         | argument            | environment (first set wins)           | default                   |
|-----------------|---------------------|----------------------------------------|---------------------------|
| endpoint        | `base_url`          | `CAIRN_BASE_URL`, `ANTHROPIC_BASE_URL` | Anthropic's API (2)       |
| API key         | `api_key`           | `CAIRN_API_KEY`, `ANTHROPIC_API_KEY`   | none (required there)     |
| model           | `model`             | `CAIRN_MODEL`                          | none: required            |
| context window  | `context_window`    | `CAIRN_CONTEXT_WINDOW`                 | none (the host decides)   |
| output cap      | `max_output_tokens` | `CAIRN_MAX_OUTPUT_TOKENS`              | none: 8,192 is sent (1)   |
| thinking        | `thinking`          | `CAIRN_THINKING` (3)                   | by the budget (3)         |
| thinking budget | `thinking_budget`   | `CAIRN_THINKING_BUDGET`                | none                      |
| effort          | `effort`            | `CAIRN_EFFORT` (4)                     | none: not sent            |
| prompt caching  | `prompt_caching`    | `CAIRN_PROMPT_CACHE` (`on` or `off`)   | on                        |
| turn timeout    | `timeout_s`         | `CAIRN_TIMEOUT_S`                      | 600 s                     |
| JSON summaries  | `structured_summary`| `CAIRN_STRUCTURED_SUMMARY` (5)         | `auto`                    |

(1) The Messages API requires an output cap on every request.
(2) `https://api.anthropic.com`.
(3) Extended thinking: `off`; `enabled`, with the budget (`thinking:
{"type": "enabled", "budget_tokens": N}`); or `adaptive` (`{"type":
"adaptive"}`: the model decides when and how much to think; it takes no
budget). Unset, thinking is `enabled` when a budget is set, else `off`. A
budget beside `off` or `adaptive`, or `enabled` without one, is refused.
Adaptive thinking needs an SDK that defines it (2.x).
(4) `low`, `medium`, `high`, `xhigh` or `max`, sent as `output_config:
{"effort": ...}` on turns (never on the summary call): how much effort the
model puts into its answer. Needs an SDK whose `messages.create` takes
`output_config`.

(5) JSON summaries: see `config`.

As for OpenAI, `ANTHROPIC_API_KEY` is only read for Anthropic's own host or
the one `ANTHROPIC_BASE_URL` names, never sent to another server. A thinking
budget is at least 1,024 tokens (the API's floor) and below the output cap.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast
from urllib.parse import urlsplit

from cairn.actors.provider.base import StructuredMode
from cairn.actors.provider.config import (
    DEFAULT_TIMEOUT_S,
    Given,
    ProviderConfigError,
    check_common,
    check_structured,
    check_timeout,
    common_settings,
    env_int,
    env_lower,
    env_value,
    redact_url,
)

ANTHROPIC_BASE_URL = "https://api.anthropic.com"
#: the output cap sent when none is set: the Messages API requires one
ANTHROPIC_DEFAULT_MAX_OUTPUT_TOKENS = 8192
#: the smallest thinking budget the Messages API accepts
MIN_THINKING_BUDGET = 1024

#: extended thinking's modes (`CAIRN_THINKING`)
ThinkingMode = Literal["off", "enabled", "adaptive"]
THINKING_MODES: tuple[ThinkingMode, ...] = ("off", "enabled", "adaptive")
#: the effort levels of the Messages API's `output_config` (`CAIRN_EFFORT`), as SDK 2.16 lists them
EFFORTS = ("low", "medium", "high", "xhigh", "max")

ENV_ANTHROPIC_BASE_URL = ("ANTHROPIC_BASE_URL",)
ENV_ANTHROPIC_API_KEY = ("ANTHROPIC_API_KEY",)
ENV_THINKING_BUDGET = ("CAIRN_THINKING_BUDGET",)
ENV_PROMPT_CACHE = ("CAIRN_PROMPT_CACHE",)
ENV_THINKING = ("CAIRN_THINKING",)
ENV_EFFORT = ("CAIRN_EFFORT",)


def is_anthropic_host(base_url: str) -> bool:
    host = urlsplit(base_url).hostname or ""
    return host == "api.anthropic.com" or host.endswith(".anthropic.com")


@dataclass(frozen=True, kw_only=True)
class AnthropicConfig:
    """Validated settings of one Anthropic Messages endpoint. Immutable, safe to share."""

    model: str
    base_url: str = ANTHROPIC_BASE_URL
    api_key: str | None = field(default=None, repr=False)
    context_window: int | None = None
    max_output_tokens: int | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    #: extended thinking's budget in tokens, for `thinking` enabled
    thinking_budget: int | None = None
    #: extended thinking: off, enabled (with `thinking_budget`) or adaptive (the model decides);
    #: None: enabled when a budget is set, else off (`thinking_mode`)
    thinking: ThinkingMode | None = None
    #: `output_config.effort` sent on turns; None: not sent
    effort: str | None = None
    #: mark `cache_control` breakpoints (tools, system prompt, the request's `cache_breakpoints`)
    prompt_caching: bool = True
    #: summaries as a JSON object (a forced tool call): auto, on or off (see the module doc, (5))
    structured_summary: StructuredMode = "auto"

    def __post_init__(self) -> None:
        check_common(
            model=self.model,
            base_url=self.base_url,
            api_key=self.api_key,
            context_window=self.context_window,
            max_output_tokens=self.max_output_tokens,
        )
        if self.api_key is None and is_anthropic_host(self.base_url):
            raise ProviderConfigError(
                "CAIRN_API_KEY", f"no API key is set for {redact_url(self.base_url)}: set CAIRN_API_KEY"
            )
        check_timeout(self.timeout_s)
        check_structured(self.structured_summary)
        budget = self.thinking_budget
        if budget is not None:
            if isinstance(budget, bool) or not isinstance(budget, int) or budget < MIN_THINKING_BUDGET:
                raise ProviderConfigError(
                    "CAIRN_THINKING_BUDGET",
                    f"must be a whole number of tokens, at least {MIN_THINKING_BUDGET:,}, got {budget!r}",
                )
            if budget >= self.output_cap:
                raise ProviderConfigError(
                    "CAIRN_THINKING_BUDGET",
                    f"the thinking budget ({budget}) must be below the output cap ({self.output_cap}): "
                    "set CAIRN_MAX_OUTPUT_TOKENS above it",
                )
        if not isinstance(self.prompt_caching, bool):
            raise ProviderConfigError("CAIRN_PROMPT_CACHE", f"must be on or off, got {self.prompt_caching!r}")
        self._check_thinking_mode()
        if self.effort is not None and self.effort not in EFFORTS:
            raise ProviderConfigError(
                "CAIRN_EFFORT", f"must be one of {', '.join(EFFORTS)}, got {self.effort!r}"
            )

    def _check_thinking_mode(self) -> None:
        mode, budget = self.thinking, self.thinking_budget
        if mode is None:
            return
        if mode not in THINKING_MODES:
            raise ProviderConfigError(
                "CAIRN_THINKING", f"must be one of {', '.join(THINKING_MODES)}, got {mode!r}"
            )
        if mode == "enabled" and budget is None:
            raise ProviderConfigError(
                "CAIRN_THINKING_BUDGET",
                f"thinking is enabled but has no budget: set CAIRN_THINKING_BUDGET (at least "
                f"{MIN_THINKING_BUDGET:,} tokens), or CAIRN_THINKING=adaptive to let the model decide",
            )
        if mode != "enabled" and budget is not None:
            why = "the model decides how much to think" if mode == "adaptive" else "thinking is off"
            raise ProviderConfigError(
                "CAIRN_THINKING",
                f"{mode} takes no budget ({why}), but CAIRN_THINKING_BUDGET is {budget}: unset it, "
                "or set CAIRN_THINKING=enabled",
            )

    @property
    def thinking_mode(self) -> ThinkingMode:
        """Extended thinking as sent: `thinking`, else enabled when a budget is set, else off."""
        if self.thinking is not None:
            return self.thinking
        return "enabled" if self.thinking_budget is not None else "off"

    @property
    def endpoint(self) -> str:
        """The base URL as it may be shown (no user info, no query)."""
        return redact_url(self.base_url)

    @property
    def output_cap(self) -> int:
        """The cap sent when a request names none: the configured one, else 8,192."""
        return (
            self.max_output_tokens
            if self.max_output_tokens is not None
            else ANTHROPIC_DEFAULT_MAX_OUTPUT_TOKENS
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
        thinking_budget: int | None = None,
        prompt_caching: bool | None = None,
        thinking: ThinkingMode | None = None,
        effort: str | None = None,
        structured_summary: StructuredMode | None = None,
    ) -> AnthropicConfig:
        """Settings from the arguments given, the rest from `environ` (default `os.environ`)."""
        env = os.environ if environ is None else environ
        given = Given(
            model, base_url, api_key, context_window, max_output_tokens, timeout_s, structured_summary
        )
        common = common_settings(
            env, given, ENV_ANTHROPIC_BASE_URL, ANTHROPIC_BASE_URL, ENV_ANTHROPIC_API_KEY, is_anthropic_host
        )
        return cls(
            **common,
            thinking_budget=(
                thinking_budget if thinking_budget is not None else env_int(env, ENV_THINKING_BUDGET)
            ),
            prompt_caching=prompt_caching
            if prompt_caching is not None
            else env_switch(env, ENV_PROMPT_CACHE),
            thinking=thinking if thinking is not None else cast(Any, env_lower(env, ENV_THINKING)),
            effort=effort if effort is not None else env_lower(env, ENV_EFFORT),
        )


def env_switch(env: Mapping[str, str], names: tuple[str, ...], default: bool = True) -> bool:
    raw = env_value(env, names)
    if raw is None:
        return default
    lowered = raw.lower()
    if lowered in ("on", "1", "true", "yes"):
        return True
    if lowered in ("off", "0", "false", "no"):
        return False
    raise ProviderConfigError(names[0], f"must be on or off, got {raw!r}")
