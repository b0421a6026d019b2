"""Beyond C7: a summary whose own lines share no word with the transcript is refused (`grounding`).

The known-bad inputs are real: three JSON ledgers SmolLM2-135M wrote on llama.cpp's server for
sessions of the quality bench's corpus (`tests/fixtures/smollm2/quality_corpus_ledgers.json`),
each valid JSON with the seven fields, each noise. The known-good ones are summaries of the same
sessions that name what the transcript holds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cairn.actors.compactor import CompactionConfig, Compactor
from cairn.actors.compactor.checkpoint import strip_handoff
from cairn.actors.compactor.grounding import (
    GROUNDED_ONE_IN,
    own_lines,
    prompt_words,
    transcript_words,
    ungrounded,
    words,
)
from cairn.actors.compactor.prompt import PromptShape, build_prompt
from cairn.actors.compactor.structured import FIELDS, render_ledger
from cairn.actors.provider.scripted import Reply, ScriptedProvider, scripted_summary
from cairn.bench.quality_corpus import corpus
from cairn.events.model import Message
from cairn.events.protocol import HEADINGS
from cairn.events.state import SessionState, replay
from tests.compactor.builders import COUNTER, coding_session, ledger, request

LEDGERS = Path(__file__).parent.parent / "fixtures" / "smollm2" / "quality_corpus_ledgers.json"


def _at_compaction(name: str) -> SessionState:
    """The corpus session `name` folded to its first compaction point."""
    (session,) = [s for s in corpus(2) if s.name == name]
    point = session.compact_after[0]
    return replay([r for r in session.records if r.seq <= point])


def _source(state: SessionState) -> tuple[Message, ...]:
    return strip_handoff(state.context)


@pytest.mark.parametrize("name", ["coding-0", "debugging-0", "research-0"])
def test_C7_smollm2s_json_ledgers_of_the_quality_corpus_are_ungrounded(name: str) -> None:
    raw = json.loads(LEDGERS.read_text())["sessions"][name]
    body = render_ledger(raw)  # C7's shape holds: valid JSON, the seven fields, lists of strings
    source = _source(_at_compaction(name))
    lines = own_lines(body)
    known = transcript_words(source)
    grounded = [line for line in lines if not words(line).isdisjoint(known)]
    assert ungrounded(body, known) == (
        f"ungrounded: {len(grounded)} of {len(lines)} distinct lines share a word with the transcript "
        "(at least one in 3 must)"
    )
    # what little matched is chance: common words, never a path, identifier or number of the session
    assert len(grounded) * 3 < len(lines) and all(len(words(line) & known) == 1 for line in grounded)


@pytest.mark.parametrize("name", ["coding-0", "debugging-0", "research-0"])
def test_C7_a_summary_built_from_the_transcript_is_grounded(name: str) -> None:
    """The scripted model's summary picks lines of the transcript: the same sessions pass."""
    source = _source(_at_compaction(name))
    summary = scripted_summary(build_prompt(source, (), PromptShape()))
    assert ungrounded(summary, transcript_words(source)) is None


def test_C7_the_prompts_own_words_ground_nothing() -> None:
    """A ledger echoing its field names and headings (as SmolLM2 and Gemma 3 270M did) is
    refused: those words came from the prompt, not the transcript, even where a transcript has them."""
    echoed = "\n".join(f"## {h}\n- {f}\n- {h}" for h, f in zip(HEADINGS, FIELDS, strict=True))
    source = (
        Message(role="user", content="Objective: decisions_and_rationale, verification evidence.", id="u"),
    )
    assert set(FIELDS) <= prompt_words() and "verification" in prompt_words()
    why = ungrounded(echoed, transcript_words(source))
    assert why is not None and why.startswith("ungrounded: 0 of 14 ")


def test_C7_a_third_of_the_distinct_lines_is_enough_and_repeats_count_once() -> None:
    source = (Message(role="user", content="Fix parse_header in src/http/headers.py; run pytest.", id="u"),)
    known = transcript_words(source)
    one_of_three = "- parse_header is fixed\n- a2b2c2c2c2\n- 256879\n- 256879\n- 256879"
    assert len(own_lines(one_of_three)) == 3
    assert ungrounded(one_of_three, known) is None  # one in three: enough
    one_of_four = one_of_three + "\n- {{<code>}}"
    why = ungrounded(one_of_four, known)
    assert (
        why == "ungrounded: 1 of 4 distinct lines share a word with the transcript (at least one in 3 must)"
    )
    assert GROUNDED_ONE_IN == 3


def test_C7_headings_no_evidence_and_record_lines_are_not_the_models_own() -> None:
    body = (
        "## Objective and constraints\n- No evidence observed.\n- no evidence observed\n"
        "## Exact next action\n- EXACT CONTINUATION RECORD [Exact next action] :: pytest -x\n"
    )
    assert own_lines(body) == []
    why = ungrounded(body, frozenset({"pytest"}))
    assert why is not None and "no line of its own" in why


def test_C7_words_are_four_or_more_letters_digits_or_underscores_lowercased() -> None:
    assert words("Fix src/app/field_frame.py: 1,024 ms in Parse() OK") == {"field_frame", "parse"}


def test_C7_an_ungrounded_summary_is_malformed_and_the_fallback_is_committed() -> None:
    """Through the service: the model's lines are noise, so the checkpoint is the fallback's and
    the failure says why (C4 counts it)."""
    noise = ledger("- a2b2c2c2c2c2c2c2c2c2")
    provider = ScriptedProvider(summaries=(Reply(text=noise),))
    service = Compactor(provider, model="m", sleep=lambda _s: None, counter=COUNTER)
    outcome = service.compact(request(coding_session().state()))
    failure = outcome.failure
    assert failure is not None and failure.reason == "malformed" and failure.consecutive_failures == 1
    assert failure.detail.startswith("ungrounded: 0 of 1 ")
    assert outcome.checkpoint.strategy == "fallback"


def test_C7_the_grounding_gate_can_be_turned_off_for_a_deliberately_blank_baseline() -> None:
    blank = ledger("- No evidence observed.")
    provider = ScriptedProvider(summaries=(Reply(text=blank),))
    config = CompactionConfig(require_grounding=False)
    service = Compactor(provider, model="m", sleep=lambda _s: None, counter=COUNTER, config=config)
    outcome = service.compact(request(coding_session().state()))
    assert outcome.failure is None and outcome.checkpoint.strategy == "llm"


def test_C7_the_same_lines_under_every_heading_are_refused_as_repetitive() -> None:
    """SmolLM2's ledger in a `cairn demo --local-model` run: two lines, one naming 'Billing' (a
    word of the transcript), under all seven fields. Grounded by the word, but fourteen lines of
    which two are distinct: refused."""
    recorded = json.loads((LEDGERS.parent / "demo_ledger_repeated_in_every_field.json").read_text())
    body = render_ledger(recorded["raw_summary"])
    known = frozenset({"billing", "invoice"})
    assert own_lines(body) == ["billing, 2.", "billing, 4. bills,"]
    assert (
        ungrounded(body, known)
        == "repetitive: 14 lines of its own, 2 distinct (more than half repeat another line)"
    )
    # a line repeated once in a longer summary is no matter
    fine = (
        "## Objective and constraints\n- billing is fixed\n- invoice 12 sent\n"
        "## Decisions and rationale\n- billing is fixed\n- totals match the invoice"
    )
    assert ungrounded(fine, known) is None
