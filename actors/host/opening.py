"""Opening a host: the arguments of `Host.open` made into the parts a `Host` runs on.

Pure but for `load_encoding` (once per process) and the tool threads the
runtime starts; `Host.open` opens the journal and owns what this returns.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import msgspec

from cairn.actors.compactor.hooks import PreCompactionHook
from cairn.actors.host.config import HostConfig
from cairn.actors.provider.base import Provider
from cairn.actors.provider.scripted import ScriptedProvider
from cairn.actors.session.profile import profile_of
from cairn.actors.session.runtime import Runtime
from cairn.actors.session.settings import SessionSettings
from cairn.actors.tokens import Encoding, TokenCounter
from cairn.actors.tool_runner import ToolRunner
from cairn.actors.tools import ToolExecutor
from cairn.events.errors import InputError
from cairn.events.state import SessionInfo
from cairn.store.backend import JournalBackend


def wall_ms() -> int:
    """The host's default clock: the wall clock in unix milliseconds."""
    return time.time_ns() // 1_000_000


def runtime_for(
    journal: JournalBackend,
    config: HostConfig,
    *,
    encoding: Encoding,
    adapter_for: Callable[[str], Provider],
    tools: ToolExecutor | None,
    clock: Callable[[], int],
    sleep: Callable[[float], None],
    hook: PreCompactionHook | None,
    retry_draw: Callable[[], float] | None,
) -> Runtime:
    """What every session actor of the host shares: the journal, the adapters, the clocks, `config`."""
    return Runtime(
        journal=journal,
        encoding=encoding,
        adapter_for=adapter_for,
        tools=tools,
        clock_ms=clock,
        sleep=sleep,
        hook=hook,
        compaction=config.compaction,
        request_timeout_s=config.request_timeout_s,
        max_requests_per_turn=config.max_requests_per_turn,
        turn_retries=max(0, config.turn_retries),
        retry=config.retry,
        retry_draw=retry_draw if retry_draw is not None else random.random,
        tool_runner=ToolRunner(config.tool_threads, config.tool_timeout_s),
        append_timeout_s=config.append_timeout_s,
        max_tool_output_chars=config.max_tool_output_chars,
        deferred_timeout_s=config.deferred_timeout_s,
        stop_timeout_s=config.stop_timeout_s,
    )


def adapter_for(
    provider: Provider | None, provider_factory: Callable[[str], Provider] | None
) -> Callable[[str], Provider]:
    """Each session's adapter: the factory's, else one shared (default: the offline scripted one)."""
    if provider is not None and provider_factory is not None:
        raise InputError("pass provider or provider_factory, not both")
    if provider_factory is not None:
        return provider_factory
    shared: Provider = provider if provider is not None else ScriptedProvider()

    def factory(sid: str) -> Provider:
        return shared

    return factory


def default_settings(provider: object) -> SessionSettings:
    """A host's settings when it is given none: the model, window and output cap of the provider's
    own configuration (`CAIRN_MODEL`, `CAIRN_CONTEXT_WINDOW`, `CAIRN_MAX_OUTPUT_TOKENS` for the
    bundled adapters), each where it is set; the defaults of `SessionSettings` for the rest."""
    config = getattr(provider, "config", None)
    model = getattr(config, "model", None)
    if not isinstance(model, str) or not model.strip():
        return SessionSettings()
    settings = SessionSettings(model=model)
    window = getattr(config, "context_window", None)
    if isinstance(window, int) and not isinstance(window, bool):
        settings = msgspec.structs.replace(settings, context_window=window)
    cap = getattr(config, "max_output_tokens", None)
    if isinstance(cap, int) and not isinstance(cap, bool):
        settings = msgspec.structs.replace(settings, max_output_tokens=cap)
    return settings


def with_tools(base: SessionSettings, tools: ToolExecutor | None) -> SessionSettings:
    """`base`, its empty tool schemas and read-only names filled in from the executor's."""
    if tools is None:
        return base
    schemas = tuple(getattr(tools, "schemas", ()) or ())
    read_only = getattr(tools, "read_only", None)
    if not base.tool_schemas and schemas:
        base = msgspec.structs.replace(base, tool_schemas=schemas)
    if base.read_only_tools is None and read_only is not None:
        base = msgspec.structs.replace(base, read_only_tools=tuple(read_only))
    return base


def fixed_tokens(settings: SessionSettings, encoding: Encoding | None) -> int:
    """P2: the tokens the system prompt and tool schemas of `settings` add to every request."""
    info = SessionInfo(
        workspace="",
        model=settings.model,
        system_prompt=settings.system_prompt,
        tool_schemas=settings.tool_schemas,
    )
    return profile_of(info, TokenCounter(encoding)).fixed_tokens
