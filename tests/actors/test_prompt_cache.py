"""Prompt caching end to end: a real host on a real store, the scripted model with its prompt cache,
and `cairn sessions` run as a user runs it.

The scripted model caches the prefix that ends at each breakpoint a request
names and reports cache reads and writes; the session picks its
breakpoints (the checkpoint's summary, the newest message under the
hand-off), records the three figures in its `usage` events, and
`cairn sessions` shows the hit ratio and the slimming and compaction
decisions that broke a cached prefix.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cairn.actors.provider.scripted import ScriptedProvider
from cairn.events.kinds import CheckpointCommitted, ContextSlimmed, Usage
from cairn.store import Journal
from tests.actors.helpers import WAIT, Agent, Clock, open_host

ROOT = Path(__file__).resolve().parents[2]


def _cairn(*argv: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "cairn.cli", *argv]
    env = {**os.environ, "COLUMNS": "250"}
    return subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def _turn_requests(provider: ScriptedProvider) -> list:  # type: ignore[type-arg]
    return [r for r in provider.requests if r.purpose == "turn"]


def test_breakpoints_usage_and_the_cost_of_slimming_through_a_host_and_the_cli(tmp_path: Path) -> None:
    store = tmp_path / "store"
    clock = Clock()
    provider = ScriptedProvider(responder=Agent(), prompt_cache=True)
    host = open_host(store, provider, clock=clock)
    try:
        # window 20,000, cap 4,000: hand-off at 11,200, compaction at 12,800
        assert host.send("s", "tools 6 x 900 #a", workspace=tmp_path).result(WAIT).ok
        assert host.send("s", "tools 5 x 900 #b").result(WAIT).ok  # ends in the hand-off band
        clock.advance(61_000)
        assert host.send("s", "go on").result(WAIT).ok  # micro compaction (S4)
        assert host.send("s", "tools 3 x 900 #c").result(WAIT).ok  # snips (S1)
        assert host.send("s", "tools 4 x 1500 #d").result(WAIT).ok  # a threshold checkpoint
        assert host.send("s", "tools 1 x 50 #e").result(WAIT).ok
    finally:
        host.close()

    requests = _turn_requests(provider)
    assert [len(r.messages) for r in requests[:2]] == [2, 4]
    assert [r.cache_breakpoints for r in requests[:2]] == [(1,), (3,)]  # the newest message
    carrying = [r for r in requests if r.messages[-1].meta.origin == "handoff"]
    assert carrying and all(r.cache_breakpoints == (len(r.messages) - 2,) for r in carrying)
    compacted = [r for r in requests if r.messages[1].meta.origin == "summary"]
    assert len(compacted) == 6
    assert all(r.cache_breakpoints == (1, len(r.messages) - 1) for r in compacted)

    with Journal.open(store, readonly=True) as journal:
        records = list(journal.read("s"))
    usages = [r.event for r in records if isinstance(r.event, Usage)]
    decisions = [r for r in records if isinstance(r.event, ContextSlimmed | CheckpointCommitted)]
    assert [type(r.event).__name__ for r in decisions] == [
        "ContextSlimmed",
        "ContextSlimmed",
        "ContextSlimmed",
        "CheckpointCommitted",
    ]
    # the first request writes its whole prompt; the next reads it and writes the rest
    assert (usages[0].prompt_tokens, usages[0].cached_prompt_tokens, usages[0].cache_write_tokens) == (
        28,
        0,
        28,
    )
    assert usages[1].cached_prompt_tokens == 28
    # after each decision the next request reads only what lies before the history it rewrote:
    # the first user message (system, tools, ask: 28) before a slimming, system and tools (20)
    # after the checkpoint
    after = [next(u for r, u in _usages_by_seq(records) if r > d.seq) for d in decisions]
    assert [u.cached_prompt_tokens for u in after] == [28, 28, 28, 20]

    listed = _cairn("sessions", "--store", str(store), "--json")
    assert listed.returncode == 0, listed.stderr
    [session] = json.loads(listed.stdout)
    reads = sum(u.cached_prompt_tokens or 0 for u in usages)
    writes = sum(u.cache_write_tokens for u in usages if isinstance(u.cache_write_tokens, int))
    prompts = sum(u.prompt_tokens or 0 for u in usages)
    assert (session["cache_read_tokens"], session["cache_write_tokens"]) == (reads, writes)
    assert session["cache_hit_ratio"] == reads / prompts
    assert (session["cache_breaks_by_slimming"], session["cache_breaks_by_checkpoint"]) == (3, 1)
    assert session["cache_breaks"] == 4

    logged = _cairn("log", "s", "--store", str(store), "--kind", "usage")
    assert logged.returncode == 0, logged.stderr
    assert "prompt=28 completion=" in logged.stdout and "total=" in logged.stdout
    assert "cache_read=0 cache_write=28" in logged.stdout.splitlines()[1]

    context = _cairn("context", "s", "--store", str(store), "--json")
    assert context.returncode == 0, context.stderr
    shown = json.loads(context.stdout)
    assert shown["messages_sent"][1]["origin"] == "summary"
    assert shown["cache_breakpoints"] == [1, shown["messages"] - 1]

    table = _cairn("sessions", "--store", str(store))
    assert table.returncode == 0, table.stderr
    header, row = table.stdout.splitlines()[:2]
    assert "cache hit" in header and "cache breaks" in header
    assert row.split()[-3:-1] == [f"{reads / prompts:.1%}", "4"]  # cache hit, cache breaks, workspace


def _usages_by_seq(records: list) -> list:  # type: ignore[type-arg]
    return [(r.seq, r.event) for r in records if isinstance(r.event, Usage)]


def test_a_provider_that_reports_no_cache_figures_shows_a_dash(tmp_path: Path) -> None:
    store = tmp_path / "store"
    host = open_host(store, ScriptedProvider(responder=Agent()))
    try:
        assert host.send("plain", "tools 2 x 20 #p", workspace=tmp_path).result(WAIT).ok
    finally:
        host.close()
    [session] = json.loads(_cairn("sessions", "--store", str(store), "--json").stdout)
    assert session["cache_hit_ratio"] is None and session["cache_read_tokens"] is None
    assert (session["cache_breaks"], session["cache_write_tokens"]) == (0, None)
    table = _cairn("sessions", "--store", str(store))
    assert table.returncode == 0, table.stderr
    row = table.stdout.splitlines()[1].split()
    assert row[0] == "plain" and row[-3:-1] == ["-", "0"]  # cache hit, cache breaks, workspace
    assert "cache hit -: the provider reported no prompt-cache figures" in table.stdout.splitlines()
