"""The Anthropic adapter's settings, `CAIRN_PROVIDER` and the factory: clear errors, the key kept safe."""

from __future__ import annotations

import pytest

from cairn.actors.provider.anthropic_config import AnthropicConfig
from cairn.actors.provider.anthropic_messages import AnthropicProvider
from cairn.actors.provider.config import ProviderConfigError, provider_kind
from cairn.actors.provider.factory import provider_from_env
from cairn.actors.provider.openai_compat import OpenAIProvider
from cairn.actors.provider.redact import adapter_secrets

KEY = "sk-ant-config-test-0123456789abcdef"
LOCAL = "http://127.0.0.1:8000"


def test_every_setting_comes_from_the_cairn_variables() -> None:
    config = AnthropicConfig.from_env(
        {
            "CAIRN_PROVIDER": "anthropic",
            "CAIRN_BASE_URL": LOCAL,
            "CAIRN_API_KEY": KEY,
            "CAIRN_MODEL": "claude-sonnet-4-5",
            "CAIRN_CONTEXT_WINDOW": "200_000",
            "CAIRN_MAX_OUTPUT_TOKENS": "16000",
            "CAIRN_TIMEOUT_S": "45",
            "CAIRN_THINKING_BUDGET": "4096",
            "CAIRN_PROMPT_CACHE": "off",
        }
    )
    assert config == AnthropicConfig(
        model="claude-sonnet-4-5",
        base_url=LOCAL,
        api_key=KEY,
        context_window=200_000,
        max_output_tokens=16_000,
        timeout_s=45.0,
        thinking_budget=4096,
        prompt_caching=False,
    )
    assert config.output_cap == 16_000


def test_defaults_anthropic_host_its_own_key_variable_caching_on_and_an_8192_cap() -> None:
    config = AnthropicConfig.from_env({"CAIRN_MODEL": "claude-haiku-4-5", "ANTHROPIC_API_KEY": KEY})
    assert (config.base_url, config.api_key, config.prompt_caching) == (
        "https://api.anthropic.com",
        KEY,
        True,
    )
    assert (config.output_cap, config.thinking_budget, config.timeout_s) == (8192, None, 600.0)


def test_anthropic_api_key_is_never_sent_to_another_server() -> None:
    config = AnthropicConfig.from_env({"CAIRN_MODEL": "m", "CAIRN_BASE_URL": LOCAL, "ANTHROPIC_API_KEY": KEY})
    assert config.api_key is None
    own = AnthropicConfig.from_env(
        {"CAIRN_MODEL": "m", "ANTHROPIC_BASE_URL": LOCAL, "ANTHROPIC_API_KEY": KEY}
    )
    assert (own.base_url, own.api_key) == (LOCAL, KEY)


@pytest.mark.parametrize(
    ("env", "setting"),
    [
        ({"CAIRN_BASE_URL": LOCAL}, "CAIRN_MODEL"),
        ({"CAIRN_MODEL": "m"}, "CAIRN_API_KEY"),  # Anthropic's own host needs a key
        ({"CAIRN_MODEL": "m", "CAIRN_BASE_URL": "ftp://x"}, "CAIRN_BASE_URL"),
        (
            {"CAIRN_MODEL": "m", "CAIRN_BASE_URL": LOCAL, "CAIRN_THINKING_BUDGET": "512"},
            "CAIRN_THINKING_BUDGET",
        ),
        (
            {"CAIRN_MODEL": "m", "CAIRN_BASE_URL": LOCAL, "CAIRN_THINKING_BUDGET": "9000"},
            "CAIRN_THINKING_BUDGET",
        ),
        ({"CAIRN_MODEL": "m", "CAIRN_BASE_URL": LOCAL, "CAIRN_PROMPT_CACHE": "maybe"}, "CAIRN_PROMPT_CACHE"),
        ({"CAIRN_MODEL": "m", "CAIRN_BASE_URL": LOCAL, "CAIRN_TIMEOUT_S": "-1"}, "CAIRN_TIMEOUT_S"),
        (
            {
                "CAIRN_MODEL": "m",
                "CAIRN_BASE_URL": LOCAL,
                "CAIRN_CONTEXT_WINDOW": "8000",
                "CAIRN_MAX_OUTPUT_TOKENS": "8000",
            },
            "CAIRN_MAX_OUTPUT_TOKENS",
        ),
    ],
)
def test_a_missing_or_malformed_setting_names_its_variable(env: dict[str, str], setting: str) -> None:
    with pytest.raises(ProviderConfigError) as caught:
        AnthropicConfig.from_env(env)
    assert caught.value.setting == setting
    assert KEY not in str(caught.value)


@pytest.mark.parametrize(
    ("thinking", "budget", "mode"),
    [
        ("", "", "off"),
        ("", "4096", "enabled"),  # a budget alone turns thinking on, as before CAIRN_THINKING
        ("Enabled", "4096", "enabled"),
        (" adaptive ", "", "adaptive"),
        ("off", "", "off"),
    ],
)
def test_cairn_thinking_picks_off_enabled_or_adaptive(thinking: str, budget: str, mode: str) -> None:
    env = {"CAIRN_MODEL": "m", "CAIRN_BASE_URL": LOCAL, "CAIRN_THINKING": thinking}
    config = AnthropicConfig.from_env({**env, "CAIRN_THINKING_BUDGET": budget, "CAIRN_EFFORT": " High"})
    assert (config.thinking_mode, config.effort) == (mode, "high")


@pytest.mark.parametrize(
    ("env", "setting", "said"),
    [
        ({"CAIRN_THINKING": "on"}, "CAIRN_THINKING", "must be one of off, enabled, adaptive, got 'on'"),
        ({"CAIRN_THINKING": "enabled"}, "CAIRN_THINKING_BUDGET", "thinking is enabled but has no budget"),
        (
            {"CAIRN_THINKING": "adaptive", "CAIRN_THINKING_BUDGET": "4096"},
            "CAIRN_THINKING",
            "adaptive takes no budget",
        ),
        ({"CAIRN_THINKING": "off", "CAIRN_THINKING_BUDGET": "4096"}, "CAIRN_THINKING", "off takes no budget"),
        ({"CAIRN_EFFORT": "extreme"}, "CAIRN_EFFORT", "low, medium, high, xhigh, max, got 'extreme'"),
    ],
)
def test_a_bad_thinking_mode_or_effort_names_its_variable(
    env: dict[str, str], setting: str, said: str
) -> None:
    with pytest.raises(ProviderConfigError) as caught:
        AnthropicConfig.from_env({"CAIRN_MODEL": "m", "CAIRN_BASE_URL": LOCAL, **env})
    assert caught.value.setting == setting and said in str(caught.value)
    with pytest.raises(ProviderConfigError):  # the same through arguments
        AnthropicConfig(model="m", base_url=LOCAL, thinking="maybe")  # type: ignore[arg-type]


def test_the_key_is_kept_out_of_reprs_and_handed_to_the_actor_for_redaction() -> None:
    config = AnthropicConfig(model="m", base_url=LOCAL, api_key=KEY)
    with AnthropicProvider(config) as provider:
        assert KEY not in repr(config) and KEY not in repr(provider)
        assert KEY in adapter_secrets(provider)


def test_cairn_provider_picks_the_adapter_and_refuses_an_unknown_one() -> None:
    assert provider_kind({}) == "openai"
    assert provider_kind({"CAIRN_PROVIDER": " Anthropic "}) == "anthropic"
    with pytest.raises(ProviderConfigError) as caught:
        provider_kind({"CAIRN_PROVIDER": "claude"})
    assert caught.value.setting == "CAIRN_PROVIDER" and "openai, anthropic" in str(caught.value)
    env = {"CAIRN_MODEL": "m", "CAIRN_BASE_URL": LOCAL}
    with provider_from_env({**env, "CAIRN_PROVIDER": "anthropic"}, max_output_tokens=2000) as anthropic:
        assert isinstance(anthropic, AnthropicProvider) and anthropic.config.output_cap == 2000
    with provider_from_env(env) as openai:
        assert isinstance(openai, OpenAIProvider)
