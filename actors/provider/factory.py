"""The provider adapter `CAIRN_PROVIDER` names, built from the `CAIRN_*` environment.

| `CAIRN_PROVIDER`     | adapter                                   | settings                           |
|----------------------|-------------------------------------------|------------------------------------|
| unset, `openai`      | `openai_compat.OpenAIProvider`            | `config.OpenAIConfig`              |
| `anthropic`          | `anthropic_messages.AnthropicProvider`    | `anthropic_config.AnthropicConfig` |

Anything else raises `ProviderConfigError` naming `CAIRN_PROVIDER`, as a
missing or malformed setting of the adapter does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cairn.actors.provider.anthropic_messages import AnthropicProvider
from cairn.actors.provider.config import provider_kind
from cairn.actors.provider.openai_compat import OpenAIProvider

EnvProvider = OpenAIProvider | AnthropicProvider


def provider_from_env(environ: Mapping[str, str] | None = None, **settings: Any) -> EnvProvider:
    """The adapter of `CAIRN_PROVIDER`, with `settings` over its `CAIRN_*` variables."""
    if provider_kind(environ) == "anthropic":
        return AnthropicProvider.from_env(environ, **settings)
    return OpenAIProvider.from_env(environ, **settings)
