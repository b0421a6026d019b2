"""Adapter settings from arguments and the environment; clear errors; the key kept out of reprs."""

from __future__ import annotations

import pytest

from cairn.actors.provider.config import NO_KEY, OpenAIConfig, ProviderConfigError
from cairn.events.errors import InputError

KEY = "sk-config-test-0123456789abcdef"
LOCAL = "http://127.0.0.1:8000/v1"


def test_every_setting_comes_from_the_cairn_variables() -> None:
    config = OpenAIConfig.from_env(
        {
            "CAIRN_BASE_URL": LOCAL,
            "CAIRN_API_KEY": KEY,
            "CAIRN_MODEL": "qwen",
            "CAIRN_CONTEXT_WINDOW": "16_000",
            "CAIRN_MAX_OUTPUT_TOKENS": " 2000 ",
            "CAIRN_TIMEOUT_S": "45.5",
        }
    )
    assert config == OpenAIConfig(
        model="qwen",
        base_url=LOCAL,
        api_key=KEY,
        context_window=16000,
        max_output_tokens=2000,
        timeout_s=45.5,
    )


def test_arguments_win_over_the_environment_and_empty_variables_are_unset() -> None:
    env = {"CAIRN_MODEL": "from-env", "CAIRN_BASE_URL": "", "CAIRN_CONTEXT_WINDOW": "", "CAIRN_API_KEY": KEY}
    config = OpenAIConfig.from_env(env, model="from-arg", context_window=8000)
    assert (config.model, config.context_window, config.base_url) == (
        "from-arg",
        8000,
        "https://api.openai.com/v1",
    )


def test_a_missing_model_names_the_variable() -> None:
    with pytest.raises(ProviderConfigError) as caught:
        OpenAIConfig.from_env({"CAIRN_BASE_URL": LOCAL})
    assert caught.value.setting == "CAIRN_MODEL"
    assert "CAIRN_MODEL" in str(caught.value)
    assert isinstance(caught.value, InputError)


def test_openai_itself_needs_a_key_and_a_local_server_does_not() -> None:
    with pytest.raises(ProviderConfigError) as caught:
        OpenAIConfig.from_env({"CAIRN_MODEL": "gpt-4o"})
    assert caught.value.setting == "CAIRN_API_KEY"
    local = OpenAIConfig.from_env({"CAIRN_MODEL": "llama", "CAIRN_BASE_URL": LOCAL})
    assert local.api_key is None and local.bearer == NO_KEY


def test_the_openai_key_is_read_only_for_its_own_endpoint() -> None:
    openai_env = {"CAIRN_MODEL": "gpt-4o", "OPENAI_API_KEY": KEY}
    assert OpenAIConfig.from_env(openai_env).api_key == KEY
    paired = {**openai_env, "OPENAI_BASE_URL": LOCAL}
    assert OpenAIConfig.from_env(paired).api_key == KEY
    elsewhere = {**openai_env, "CAIRN_BASE_URL": LOCAL}
    assert OpenAIConfig.from_env(elsewhere).api_key is None
    assert OpenAIConfig.from_env(openai_env, base_url=LOCAL).api_key is None


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("CAIRN_CONTEXT_WINDOW", "big"),
        ("CAIRN_CONTEXT_WINDOW", "-5"),
        ("CAIRN_MAX_OUTPUT_TOKENS", "1.5"),
        ("CAIRN_TIMEOUT_S", "0"),
        ("CAIRN_TIMEOUT_S", "inf"),
        ("CAIRN_BASE_URL", "localhost:8000"),
        ("CAIRN_BASE_URL", "ftp://example.com"),
    ],
)
def test_a_malformed_variable_is_named_with_its_value(variable: str, value: str) -> None:
    env = {"CAIRN_MODEL": "m", "CAIRN_BASE_URL": LOCAL, variable: value}
    with pytest.raises(ProviderConfigError) as caught:
        OpenAIConfig.from_env(env)
    assert caught.value.setting == variable


def test_the_output_cap_must_fit_the_window() -> None:
    with pytest.raises(ProviderConfigError) as caught:
        OpenAIConfig(model="m", base_url=LOCAL, context_window=16000, max_output_tokens=16000)
    assert caught.value.setting == "CAIRN_MAX_OUTPUT_TOKENS"


def test_a_key_with_whitespace_is_refused_without_showing_it() -> None:
    bad = "sk-line\nbreak-secret"
    with pytest.raises(ProviderConfigError) as caught:
        OpenAIConfig.from_env({"CAIRN_MODEL": "m", "CAIRN_BASE_URL": LOCAL}, api_key=bad)
    assert caught.value.setting == "CAIRN_API_KEY"
    assert "secret" not in str(caught.value)


def test_the_key_stays_out_of_repr_and_the_shown_endpoint() -> None:
    config = OpenAIConfig(
        model="m", base_url="https://user:pw-secret@proxy.example/v1?token=t-secret", api_key=KEY
    )
    assert KEY not in repr(config)
    assert config.endpoint == "https://proxy.example/v1"
    assert "secret" not in config.endpoint
