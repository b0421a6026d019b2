"""Compactions that must not succeed, through a real host: a summary that ignores the ledger
contract (C7), and a threshold compaction that cannot make the context smaller (C10, F2, L2)."""

from __future__ import annotations

from pathlib import Path

import msgspec

from cairn.actors.provider.scripted import Reply, ScriptedProvider
from cairn.events.kinds import CheckpointCommitted, CompactionFailed, Request, TurnFailed
from tests.actors.helpers import SETTINGS, WAIT, Agent, Seed, open_host, reopen_and_compare, words
from tests.compactor.builders import C7_HEADINGS


def _events(host, kind):  # type: ignore[no-untyped-def]
    return [r.event for r in host.journal.read("s") if isinstance(r.event, kind)]


def _over_threshold(host, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A history past the compaction threshold (12,800 of a 16,000 budget): the next request compacts."""
    seed = Seed(host.journal, "s", str(tmp_path))
    for _ in range(7):
        seed.turn(tools=[2_000])


# --- C7: a summary without the seven headings is a failed summary ------------------------------------


def test_C7_a_free_text_summary_is_a_malformed_failure_and_the_fallback_is_committed(tmp_path: Path) -> None:
    provider = ScriptedProvider(responder=Agent(), summary_format="free-text")
    host = open_host(tmp_path / "store", provider)
    _over_threshold(host, tmp_path)

    result = host.send("s", "go on").result(WAIT)

    assert result.ok
    (failure,) = _events(host, CompactionFailed)
    assert (failure.reason, failure.attempt, failure.consecutive_failures) == ("malformed", 1, 1)
    assert "none of the seven ledger headings" in failure.detail
    (checkpoint,) = _events(host, CheckpointCommitted)
    assert (checkpoint.trigger, checkpoint.strategy) == ("threshold", "fallback")
    assert checkpoint.diagnostics.failure_reason == "malformed"
    assert checkpoint.raw_summary is None
    assert checkpoint.replacement_tokens < checkpoint.source_tokens
    summary = checkpoint.replacement_messages[0]
    assert summary.meta.origin == "fallback-summary"  # never an "llm" ledger of "No evidence observed."
    assert len([r for r in provider.requests if r.purpose == "summary"]) == 1  # not retried
    assert host.state("s").carried.compaction_failures == 1  # it counts for the breaker (C4)
    reopen_and_compare(host, tmp_path / "store", ["s"]).close()


def test_C7_a_summary_missing_one_heading_is_malformed_and_names_it(tmp_path: Path) -> None:
    sections = "\n".join(f"## {h}\n- noted." for h in C7_HEADINGS if h != "Verification evidence")
    provider = ScriptedProvider(
        summaries=(Reply(text=f"<summary>\n{sections}\n</summary>"),), responder=Agent()
    )
    host = open_host(tmp_path / "store", provider)
    _over_threshold(host, tmp_path)

    assert host.send("s", "go on").result(WAIT).ok

    (failure,) = _events(host, CompactionFailed)
    assert failure.reason == "malformed" and "'Verification evidence'" in failure.detail
    assert "1 of the seven" in failure.detail
    assert [c.strategy for c in _events(host, CheckpointCommitted)] == ["fallback"]
    host.close()


def test_C7_headings_out_of_order_or_repeated_are_repaired_by_the_rebuild(tmp_path: Path) -> None:
    shuffled = [*reversed(C7_HEADINGS), C7_HEADINGS[0]]
    body = "\n".join(f"## {h}\n- point under {h}: read seed-1." for h in shuffled)
    provider = ScriptedProvider(summaries=(Reply(text=f"<summary>\n{body}\n</summary>"),), responder=Agent())
    host = open_host(tmp_path / "store", provider)
    _over_threshold(host, tmp_path)

    assert host.send("s", "go on").result(WAIT).ok

    assert _events(host, CompactionFailed) == []
    (checkpoint,) = _events(host, CheckpointCommitted)
    assert checkpoint.strategy == "llm"
    text = checkpoint.replacement_messages[0].content
    assert isinstance(text, str)
    positions = [text.index(f"## {h}") for h in C7_HEADINGS]
    assert positions == sorted(positions) and all(text.count(f"## {h}\n") == 1 for h in C7_HEADINGS)
    host.close()


# --- C10 / F2 / L2: a threshold compaction that cannot shrink the context -----------------------------


def test_L2_a_threshold_compaction_that_cannot_shrink_fails_the_turn_and_sends_nothing(
    tmp_path: Path,
) -> None:
    """A system prompt alone past the threshold and a one-line history: the fallback (notice + task)
    is larger than the history it would replace. Nothing is committed and no request goes out."""
    settings = msgspec.structs.replace(SETTINGS, system_prompt=words(13_000, "rules"))
    provider = ScriptedProvider(responder=Agent())
    host = open_host(tmp_path / "store", provider, settings=settings)

    result = host.send("s", "hello", workspace=str(tmp_path)).result(WAIT)

    assert (result.status, result.phase) == ("failed", "compaction")
    assert result.error_class == "insufficient-reduction"
    assert "not smaller than its source" in result.error
    assert _events(host, CheckpointCommitted) == [] and _events(host, Request) == []
    assert [r for r in provider.requests if r.purpose == "turn"] == []
    failures = _events(host, CompactionFailed)
    assert [f.trigger for f in failures] == ["threshold", "threshold"]
    assert failures[-1].reason == "insufficient-reduction" and failures[-1].detail.startswith("fallback:")
    (failed,) = _events(host, TurnFailed)
    assert failed.phase == "compaction"
    reopen_and_compare(host, tmp_path / "store", ["s"], settings=settings).close()
