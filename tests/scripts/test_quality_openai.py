"""The quality bench against an OpenAI-compatible endpoint (`--provider openai`, the `CAIRN_*` settings):
a chat-completions server on 127.0.0.1 plays the model, through the real OpenAI adapter.

The server's model answers each summary request with the ledger the scripted
provider would write for the same transcript, so the harness must give the
same scores over the wire as offline; a model that answers in free text is
refused (C7), every compaction falls back, and the figures say so.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from cairn.actors.provider.scripted import scripted_summary
from cairn.bench import quality
from cairn.bench.quality_corpus import KINDS, corpus
from cairn.bench.quality_judge import JUDGE_SCALES, judge_set, judge_set_session
from cairn.events.model import Message
from tests.provider.chat_server import ChatServer, Received, Reply, api_error, text_reply
from tests.provider.conftest import SECRET_KEY


def _ledger_model(received: Received) -> Reply:
    messages = [
        Message(role=m["role"], content=m.get("content") or "") for m in received.body.get("messages") or []
    ]
    return text_reply(scripted_summary(messages))


def _free_text_model(received: Received) -> Reply:
    return text_reply("<summary>All good, carry on.</summary>")


@pytest.fixture(autouse=True)
def no_leaked_threads() -> Iterator[None]:
    before = set(threading.enumerate())
    yield
    leaked = [t.name for t in threading.enumerate() if t not in before and t.is_alive()]
    assert not leaked, f"threads left running: {leaked}"


def _env(server: ChatServer) -> dict[str, str]:
    # the server's model writes the scripted provider's text ledger (C7's text protocol)
    return {
        "CAIRN_BASE_URL": server.url,
        "CAIRN_MODEL": "judge-model",
        "CAIRN_API_KEY": SECRET_KEY,
        "CAIRN_STRUCTURED_SUMMARY": "off",
    }


def _figures(items: list[Any]) -> dict[str, dict[str, Any]]:
    """The figures by name, as `--json` prints them (from `Figure`s or from the report)."""
    return {str(f["name"]): f for f in msgspec.to_builtins(items)}


def test_a_ledger_model_over_the_wire_scores_as_the_scripted_provider_does() -> None:
    offline = _figures(quality.run_with(True, "scripted", {}, longrun=False))
    with ChatServer(responder=_ledger_model) as server:
        online = _figures(quality.run_with(True, "openai", _env(server), longrun=False))
        summaries = len(server.requests)
    assert summaries == 20  # one summary call per compaction point of the quick corpus
    for name in ("facts_kept", "summary_only_kept", "superseded_as_current"):
        assert online[f"quality.summarizer.{name}"]["value"] == offline[f"quality.summarizer.{name}"]["value"]
    verdict = online["quality.summarizer.meets_quality_target"]
    assert (verdict["value"], verdict["met"]) == ("yes", True)  # a real provider: the target applies
    assert "judge-model" in str(online["quality.summarizer.facts_kept"]["detail"])
    assert SECRET_KEY not in repr(online)


def test_a_model_that_ignores_the_ledger_falls_back_everywhere_and_fails_the_target() -> None:
    with ChatServer(responder=_free_text_model) as server:
        online = _figures(quality.run_with(True, "openai", _env(server), longrun=False))
    assert "20 fell back" in str(online["quality.summarizer.facts_kept"]["detail"])
    verdict = online["quality.summarizer.meets_quality_target"]
    assert (verdict["value"], verdict["met"]) == ("no", False)  # it kept the history, not a summary


def test_a_missing_setting_is_one_failed_figure_naming_it() -> None:
    figures = quality.run_with(True, "openai", {"CAIRN_BASE_URL": "http://127.0.0.1:9/v1"})
    assert [(f.name, f.met) for f in figures] == [("quality.provider", False)]
    assert "CAIRN_MODEL" in figures[0].detail


def test_cairn_bench_takes_the_provider_flag() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cairn.bench.quality", "--provider", "nope"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "scripted" in done.stderr and "openai" in done.stderr


def _reading_judge() -> ChatServer:
    """A server whose model writes the scripted ledger for summaries and, as the judge, answers each
    question with the candidate answer mentioned last in the conversation (a perfect reader)."""
    candidates: dict[str, set[str]] = {}
    judge_sets = [
        judge_set_session(kind, i, scale) for i in range(2) for kind in KINDS for scale in JUDGE_SCALES
    ]
    for session in [*corpus(2), *judge_sets]:
        for fact in session.facts:
            if fact.question:
                candidates.setdefault(fact.question, set()).add(fact.answer)

    def model(received: Received) -> Reply:
        messages = received.body.get("messages") or []
        if not str(messages[-1].get("content", "")).startswith("Conversation:"):
            return _ledger_model(received)
        conversation, questions = str(messages[-1]["content"]).split("\nQuestions:\n", 1)
        lines = []
        for line in questions.splitlines():
            number, question = line.split(". ", 1)
            seen = [(conversation.rfind(a), a) for a in candidates.get(question, ()) if a in conversation]
            lines.append(f"{number}. {max(seen)[1] if seen else 'unknown'}")
        return text_reply("\n".join(lines))

    return ChatServer(responder=model)


def test_the_judge_answers_every_probe_from_the_full_and_the_compacted_context() -> None:
    with _reading_judge() as server:
        env = {**_env(server), "CAIRN_BENCH_JUDGE": "1"}
        figures = _figures(quality.run_with(True, "openai", env, longrun=False))
        calls = len(server.requests)
    assert calls == 20 + 2 * 16  # the summaries, then two judge requests a session
    judged = figures["quality.judge.accuracy_after_over_before"]
    # a perfect reader: every answer from the full context, and from the compacted one exactly
    # what the string probes found (92 = 16 + 32 + 2 + 0 + 10 + 10 + 8 + 14 of the summarizer)
    assert judged["value"] == 0.535
    assert "right 92 vs 172 of 172; superseded answered stale 0 vs 0 of 14" in str(judged["detail"])


def test_the_judge_asks_nothing_offline() -> None:
    figures = _figures(quality.run_with(True, "scripted", {"CAIRN_BENCH_JUDGE": "1"}, longrun=False))
    assert "quality.judge.accuracy_after_over_before" not in figures


def test_cairn_bench_only_quality_provider_openai_runs_through_the_cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`cairn bench --only quality --provider openai` (the README's command): the flag reaches the
    suite, whose summaries go to the endpoint the `CAIRN_*` settings name."""
    import json

    from cairn import cli

    monkeypatch.setenv("CAIRN_BENCH_PROVIDER", "scripted")  # restored after: the bench sets it
    with ChatServer(responder=_ledger_model) as server:
        for name, value in _env(server).items():
            monkeypatch.setenv(name, value)
        status = cli.main(
            ["bench", "--only", "quality", "--quick", "--provider", "openai", "--json", "--explore"]
        )
        summaries = len(server.requests)
    report = json.loads(capsys.readouterr().out)
    assert status == 0 and report["all_met"]
    assert summaries == 20
    figures = _figures(report["figures"])
    assert "judge-model at http://127.0.0.1:" in str(figures["quality.summarizer.facts_kept"]["detail"])
    assert figures["quality.summarizer.meets_quality_target"]["met"] is True


def test_a_judge_whose_window_cannot_hold_the_corpus_asks_about_its_own_shorter_sessions() -> None:
    """A 4,096-token endpoint (`CAIRN_CONTEXT_WINDOW`, as `cairn local-model` serves SmolLM2) cannot
    read the corpus's 7,000-20,000-token sessions: the judge builds its own set (the same shapes,
    filler scaled until each fits), runs it through the summarizer, and asks about it; the two
    huge-output sessions fit at no scale (their tool output alone fills the window) and say so."""
    with _reading_judge() as server:
        env = {**_env(server), "CAIRN_BENCH_JUDGE": "1", "CAIRN_CONTEXT_WINDOW": "4096"}
        figures = _figures(quality.run_with(True, "openai", env, longrun=False))
        calls = len(server.requests)
    assert calls == 20 + 20 + 2 * 14  # the corpus's summaries, the judge set's, two judge requests a session
    judged = figures["quality.judge.accuracy_after_over_before"]
    detail = str(judged["detail"])
    assert detail.startswith(
        "14 sessions judged, of the judge's own set (the corpus does not fit the endpoint's window): "
        "16 sessions of the same shapes, filler scaled to fit (2 at 0.25, 5 at 0.125, 9 at 0); "
        "the summarizer's summaries taken there: 18 of 20; "
        "not judged: 2 x the full context does not fit the endpoint's 4,096-token window"
    )
    # a perfect reader gets every answer from the full context, fewer from the compacted one
    assert "right 87 vs 128 of 128" in detail and judged["value"] == 0.68
    assert "quality.error" not in figures


def test_a_judge_answer_asks_no_more_than_the_endpoints_output_cap() -> None:
    """With `CAIRN_MAX_OUTPUT_TOKENS` 512 a judge request asks for 512 tokens, not 2,000 (SmolLM2 ran
    to 1,300 tokens of answer, 30 s a request), and the room it keeps in the window is the same."""
    with _reading_judge() as server:
        env = {**_env(server), "CAIRN_BENCH_JUDGE": "1", "CAIRN_CONTEXT_WINDOW": "4096"}
        figures = _figures(
            quality.run_with(True, "openai", {**env, "CAIRN_MAX_OUTPUT_TOKENS": "512"}, longrun=False)
        )
        asked = [
            r.body.get("max_tokens")
            for r in server.requests
            if str((r.body.get("messages") or [{}])[-1].get("content", "")).startswith("Conversation:")
        ]
    assert asked and set(asked) == {512}
    detail = str(figures["quality.judge.accuracy_after_over_before"]["detail"])
    assert detail.startswith(f"{len(asked) // 2} sessions judged, of the judge's own set")


def test_the_judge_set_keeps_the_corpus_shapes_and_facts_with_less_filler() -> None:
    """`judge_set`: every kind, each session at the largest scale that fits, its planted facts those
    of the same shape at full scale (the filler between them is what shrinks)."""
    fulls = {kind: judge_set_session(kind, 0, 1.0) for kind in KINDS}
    chosen = judge_set(1, lambda s: len(s.records) <= 40)
    assert [s.kind for s, _ in chosen] == list(KINDS)
    for session, scale in chosen:
        full = fulls[session.kind]
        assert len(session.records) <= 40 or scale == 0.0
        assert scale == 1.0 or len(session.records) < len(full.records)
        assert [f.kind for f in session.facts] == [f.kind for f in full.facts]


def test_a_judge_request_that_fails_leaves_its_session_unjudged_and_the_suite_running() -> None:
    def model(received: Received) -> Reply:
        messages = received.body.get("messages") or []
        if str(messages[-1].get("content", "")).startswith("Conversation:"):
            return api_error(400, "request (19226 tokens) exceeds the available context size (4096 tokens)")
        return _ledger_model(received)

    with ChatServer(responder=model) as server:
        env = {**_env(server), "CAIRN_BENCH_JUDGE": "1"}
        figures = _figures(quality.run_with(True, "openai", env, longrun=False))
    detail = str(figures["quality.judge.accuracy_after_over_before"]["detail"])
    assert detail.startswith(
        "no ratio: no answer right from the full context; "
        "0 sessions judged, of the corpus; not judged: 16 x the judge's request failed: context-limit"
    )
    assert figures["quality.judge.accuracy_after_over_before"]["value"] is None
