"""Exact continuation records and the host-side ledger rebuild (C8)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cairn.actors.compactor.ledger import (
    NO_EVIDENCE_LINE,
    ExactRecord,
    extract_records,
    missing_headings,
    parse_record,
    rebuild_ledger,
)
from cairn.actors.provider.scripted import Reply, context_limit
from tests.compactor.builders import C7_HEADINGS, Log, compactor, request, text


def _sections(ledger: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current = None
    for line in ledger.splitlines():
        if line.startswith("## ") and line[3:] in C7_HEADINGS:
            assert line[3:] not in sections, "a heading appears twice"
            current = line[3:]
            sections[current] = []
        elif current is not None and line:
            sections[current].append(line)
    assert list(sections) == list(C7_HEADINGS)
    return sections


def test_C8_record_syntax_heading_case_and_space_insensitive() -> None:
    assert parse_record("EXACT CONTINUATION RECORD [exact   NEXT action] :: run make") == ExactRecord(
        "Exact next action", "run make"
    )
    assert parse_record("EXACT CONTINUATION RECORD [Nonsense] :: x") is None
    assert parse_record("EXACT CONTINUATION RECORD [Exact next action] :: " + "p" * 2049) is None
    longest = parse_record("EXACT CONTINUATION RECORD [Exact next action] :: " + "p" * 2048)  # 1..2,048 chars
    assert longest is not None and longest.payload == "p" * 2048
    assert parse_record("EXACT CONTINUATION RECORD [Exact next action] :: p") is not None
    assert parse_record("EXACT CONTINUATION RECORD [Exact next action] ::  ") is None
    assert parse_record("  EXACT CONTINUATION RECORD [Workspace mutations] :: wrote a.py") is not None


def test_C8_limits_duplicates_once_newest_win() -> None:
    lines = [f"EXACT CONTINUATION RECORD [Decisions and rationale] :: decision {n}" for n in range(40)]
    got = extract_records(["\n".join(lines), lines[39]])
    assert len(got.records) == 32 and got.omitted == 40 - 32  # C8: at most 32 records
    assert got.records[-1].payload == "decision 39" and got.records[0].payload == "decision 8"
    big = [f"EXACT CONTINUATION RECORD [Exact next action] :: {n:04d}" + "b" * 2000 for n in range(10)]
    got = extract_records(big)
    assert sum(len(r.payload) for r in got.records) <= 16_384
    assert len(got.records) == 8 and got.records[-1].payload.startswith("0009")


def test_C8_a_record_moved_by_the_model_under_the_wrong_heading_is_corrected() -> None:
    record = ExactRecord("Verification evidence", "pytest -q: 41 passed")
    model = (
        "## Objective and constraints\n- ship it\n"
        "## Exact next action\n- pytest -q: 41 passed (as recorded)\n- run the linter\n"
    )
    sections = _sections(rebuild_ledger(model, [record]))
    assert sections["Verification evidence"] == ["- pytest -q: 41 passed"]
    assert sections["Exact next action"] == ["- run the linter"]
    assert sections["Objective and constraints"] == ["- ship it"]
    assert sections["Open risks or blockers"] == [NO_EVIDENCE_LINE]


def test_C8_duplicate_model_headings_merge_and_no_evidence_yields_to_records() -> None:
    model = (
        "## 1. Objective and constraints:\n- a\n**Objective and constraints**\n- b\n"
        "## Workspace mutations\nno evidence observed"
    )
    record = ExactRecord("Workspace mutations", "edited src/x.py line 3")
    sections = _sections(rebuild_ledger(model, [record]))
    assert sections["Objective and constraints"] == ["- a", "- b"]
    assert sections["Workspace mutations"] == ["- edited src/x.py line 3"]


def test_C8_record_dropped_from_the_shrunk_prompt_still_appears_verbatim() -> None:
    payload = "python -m pytest tests/test_app.py::test_login -x --no-header"
    log = Log()
    log.turn(
        "Fix login. EXACT CONTINUATION RECORD is below.\n"
        f"EXACT CONTINUATION RECORD [exact next action] :: {payload}"
    )
    for n in range(12):
        log.tool(f"out {n} " + "r" * 2000)
        log.say(f"step {n}")
    sections = "\n".join(f"## {h}\n- No evidence observed." for h in C7_HEADINGS[:-1])
    last = "## Exact next action\n- something else entirely"
    bad_model = Reply(text=f"<summary>\n{sections}\n{last}\n</summary>")
    service, provider = compactor(context_limit(), bad_model)
    outcome = service.compact(request(log.state()))
    assert outcome.strategy == "llm"
    assert payload not in "\n".join(m.content for m in provider.requests[1].messages)  # type: ignore[misc]
    summary = text(outcome.replacement[0])
    assert f"- {payload}" in _sections(summary.split("\n\n", 1)[1])["Exact next action"]
    assert outcome.checkpoint.diagnostics.records == 1


def test_C8_records_survive_a_second_compaction() -> None:
    payload = "deploy with `make release VERSION=1.2.3`"
    log = Log()
    log.turn(f"Release.\nEXACT CONTINUATION RECORD [Exact next action] :: {payload}")
    for n in range(12):
        log.tool(f"out {n} " + "r" * 2000)
    service, _ = compactor()
    first = service.compact(request(log.state()))
    for event in first.events:
        log.add(event)
    for n in range(12):
        log.tool(f"later {n} " + "s" * 2000)
    second = service.compact(request(log.state()))
    assert f"- {payload}" in text(second.replacement[0])


_payload = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp"), blacklist_characters="\x85"),
    min_size=1,
    max_size=60,
).filter(lambda s: s.strip() != "")


@given(
    records=st.lists(st.tuples(st.sampled_from(C7_HEADINGS), _payload), max_size=12),
    model_lines=st.lists(st.tuples(st.sampled_from(C7_HEADINGS), st.text(max_size=40)), max_size=12),
    stray=st.lists(st.integers(min_value=0, max_value=11), max_size=6),
)
def test_C8_property_every_record_appears_verbatim_once_under_its_own_heading(
    records, model_lines, stray
) -> None:
    texts = [f"EXACT CONTINUATION RECORD [{h.upper()}] :: {p}" for h, p in records]
    kept = extract_records(texts).records
    # a model that restates some payloads, anywhere
    lines = [(h, line) for h, line in model_lines]
    for index in stray:
        if index < len(kept):
            lines.append((C7_HEADINGS[index % len(C7_HEADINGS)], f"- {kept[index].payload} (restated)"))
    model = "\n".join(f"## {h}\n{line}" for h, line in lines)
    sections = _sections(rebuild_ledger(model, kept))
    everything = [line for body in sections.values() for line in body]
    for record in kept:
        line = f"- {record.payload}"
        assert sections[record.heading].count(line) == 1
        same_payload = sum(1 for other in kept if other.payload == record.payload)
        assert everything.count(line) == same_payload  # nowhere else, model lines included


# --- C7: a summary the host can take names all seven headings ------------------------------------


def test_C7_missing_headings_of_free_text_are_all_seven() -> None:
    assert missing_headings("The user is refactoring; tests passed; run the linter next.") == C7_HEADINGS
    assert missing_headings("") == C7_HEADINGS


def test_C7_every_heading_present_in_any_decoration_order_or_repeat_misses_none() -> None:
    decorated = "\n".join(f"**{n}. {h}:**\n- x" for n, h in enumerate(reversed(C7_HEADINGS), 1))
    assert missing_headings(decorated) == ()
    assert missing_headings(decorated + f"\n## {C7_HEADINGS[2]}\n- again") == ()


def test_C7_a_missing_heading_is_named_and_escaped_or_inline_ones_do_not_count() -> None:
    body = "\n".join(f"## {h}\n- x" for h in C7_HEADINGS[:-1])
    assert missing_headings(body) == ("Exact next action",)
    assert missing_headings(body + "\n[earlier] ## Exact next action") == ("Exact next action",)
    assert missing_headings(body + "\nThe exact next action is to run the tests.") == ("Exact next action",)


def test_C7_a_free_text_reply_is_not_retried_and_fails_as_malformed() -> None:
    service, provider = compactor(Reply(text="<summary>All fine, keep going.</summary>"))
    outcome = service.compact(request(_long_log().state()))
    assert provider.calls == 1
    assert outcome.strategy == "fallback"
    failure = outcome.failure
    assert failure is not None and failure.reason == "malformed" and failure.attempt == 1
    assert "none of the seven ledger headings" in failure.detail
    assert outcome.checkpoint.diagnostics.failure_reason == "malformed"


def test_C7_an_empty_reply_is_still_retried_and_a_full_ledger_then_succeeds() -> None:
    full = "<summary>\n" + "\n".join(f"## {h}\n- x" for h in C7_HEADINGS) + "\n</summary>"
    service, provider = compactor(Reply(text="<analysis>only thinking</analysis>"), Reply(text=full))
    outcome = service.compact(request(_long_log().state()))
    assert provider.calls == 2 and outcome.strategy == "llm" and outcome.failure is None


def _long_log() -> Log:
    log = Log()
    log.turn("Fix login.")
    for n in range(12):
        log.tool(f"out {n} " + "r" * 2000)
        log.say(f"step {n}")
    return log
