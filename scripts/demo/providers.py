"""The providers of the demo: what differs between a scripted run and one on an OpenAI-compatible or
Anthropic endpoint."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cairn import SessionSettings
from cairn.actors.provider.base import Provider
from cairn.actors.session.budget import budget_for
from cairn.actors.tokens import TokenCounter
from cairn.actors.tools import ToolExecutor
from cairn.demo.agent import SETTINGS, provider_for
from cairn.demo.errors import DemoSetupError
from cairn.demo.tasks import attachment_tokens, grown_task, task_text

if TYPE_CHECKING:  # the SDKs take a second to import: only the endpoint setups import them
    from cairn.actors.provider.anthropic_messages import AnthropicProvider
    from cairn.actors.provider.openai_compat import OpenAIProvider


@dataclass(frozen=True)
class Setup:
    """What differs between the providers: the model, the adapter and the user messages."""

    provider: str
    settings: SessionSettings
    adapter_for: Callable[[str], Provider]
    message: Callable[[str, int, Path], str]
    #: the longest wait for a turn's next event or its end (a real endpoint may be slow)
    wait_s: float = 120.0
    endpoint: str = ""
    close: Callable[[], None] = lambda: None
    #: the sessions' tools (None: `WorkspaceTools`; `cairn demo --mcp`: the MCP filesystem server's)
    tools: ToolExecutor | None = None


def scripted_setup() -> Setup:
    """The demo offline: one scripted agent per session (`agent.provider_for`), plain tasks."""
    return Setup(
        provider="scripted",
        settings=SETTINGS,
        adapter_for=provider_for,
        message=lambda sid, turn, workspace: task_text(sid, turn),
    )


OPENAI_SYSTEM_PROMPT = (
    "You are a careful coding agent working in a small Python repository. Each task comes with "
    "files attached; use the tools (read, grep, list, write) when you need more. Answer in a few "
    "short paragraphs and report precisely what you found."
)


def openai_setup(environ: dict[str, str] | None = None) -> Setup:
    """The demo on an OpenAI-compatible endpoint from the `CAIRN_*` variables.

    Raises `ProviderConfigError` when the endpoint is not configured, and
    `DemoSetupError` when the context window is missing or leaves no input budget.
    """
    from cairn.actors.provider.openai_compat import OpenAIProvider

    return endpoint_setup("openai", OpenAIProvider.from_env(environ))


def anthropic_setup(environ: dict[str, str] | None = None) -> Setup:
    """The demo on Anthropic's Messages API (or a server that speaks it) from the `CAIRN_*` variables
    (`CAIRN_BASE_URL`, `CAIRN_API_KEY` or `ANTHROPIC_API_KEY`, `CAIRN_MODEL`, `CAIRN_CONTEXT_WINDOW`, ...).

    Raises as `openai_setup` does.
    """
    from cairn.actors.provider.anthropic_messages import AnthropicProvider

    return endpoint_setup("anthropic", AnthropicProvider.from_env(environ))


def endpoint_setup(name: str, provider: OpenAIProvider | AnthropicProvider) -> Setup:
    """The demo on a configured endpoint: its model and window, the growing tasks; `provider` is closed
    when the setup is refused (`DemoSetupError`) and by `Setup.close` otherwise."""
    config = provider.config
    try:
        if config.context_window is None:
            raise DemoSetupError(
                "CAIRN_CONTEXT_WINDOW: the demo must know the model's context window to size its "
                "turns; set it to the window of CAIRN_MODEL (or smaller, e.g. CAIRN_CONTEXT_WINDOW=16000)"
            )
        settings = SessionSettings(
            model=config.model,
            context_window=config.context_window,
            max_output_tokens=config.max_output_tokens,
            system_prompt=OPENAI_SYSTEM_PROMPT,
        )
        if budget_for(settings.context_window, settings.max_output_tokens).input_budget is None:
            raise DemoSetupError(
                f"CAIRN_CONTEXT_WINDOW={config.context_window} leaves no input budget after the output "
                "reserve (the output cap, else 10 % of the window and at least 8,192 tokens): set "
                "CAIRN_MAX_OUTPUT_TOKENS below the window, or use a larger window"
            )
    except DemoSetupError:
        provider.close()
        raise
    counter = TokenCounter()
    tokens = attachment_tokens(settings)

    def message(sid: str, turn: int, workspace: Path) -> str:
        return grown_task(sid, turn, workspace, tokens=tokens, counter=counter)

    return Setup(
        provider=name,
        settings=settings,
        adapter_for=lambda sid: provider,
        message=message,
        wait_s=max(900.0, 2 * config.timeout_s),
        endpoint=config.endpoint,
        close=provider.close,
    )
