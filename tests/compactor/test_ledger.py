"""Exact continuation records and the host-side ledger rebuild (C8)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cairn.actors.compactor import verify_checkpoint
from cairn.actors.compactor.ledger import (
    NO_EVIDENCE_LINE,
    ExactRecord,
    extract_records,
    missing_headings,
    parse_record,
    rebuild_ledger,
    source_records,
)
from cairn.actors.compactor.replacement import FALLBACK_NOTICE
from cairn.actors.provider.scripted import Reply, context_limit, http_error
from cairn.events.model import text_of
from tests.compactor.builders import C7_HEADINGS, COUNTER, Log, compactor, request, text


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
    last = "## Exact next action\n- something else entirely: login after step 11"
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
    full = "<summary>\n" + "\n".join(f"## {h}\n- fix login: {h}" for h in C7_HEADINGS) + "\n</summary>"
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


# --- the spent rule (beyond C8): a next action that ran is done, only the newest stays ------------


def _record(heading: str, payload: str) -> str:
    return f"EXACT CONTINUATION RECORD [{heading}] :: {payload}"


def _ledger_of(log: Log) -> dict[str, list[str]]:
    """The ledger rebuilt from the records alone (as the fallback and a blank summary give it)."""
    return _sections(rebuild_ledger("", source_records(log.state().context).records))


def test_C8_spent_by_the_exact_raw_arguments_of_a_later_successful_call() -> None:
    log = Log()
    log.turn("Fix login.")
    log.say(f"Next I run the check.\n{_record('Exact next action', 'make check')}")
    log.tool("all 12 checks passed", name="bash", arguments="  make check\n")
    sections = _ledger_of(log)
    assert sections["Exact next action"] == ["- No evidence observed."]
    assert sections["Verification evidence"] == [
        "- Ran as a successful tool call, no longer pending: make check"
    ]
    assert source_records(log.state().context).records == (
        ExactRecord("Verification evidence", "make check", spent=True),
    )


def test_C8_spent_by_a_string_value_anywhere_in_the_json_arguments() -> None:
    payload = "pytest tests/test_app.py::test_login -x"
    log = Log()
    log.turn("Fix login.")
    log.say(_record("Exact next action", f"  {payload} "))
    log.tool("1 passed", name="bash", arguments='{"argv": {"shell": ["bash", "-lc", " ' + payload + '"]}}')
    sections = _ledger_of(log)
    assert sections["Exact next action"] == ["- No evidence observed."]
    assert sections["Verification evidence"] == [
        "- Ran as a successful tool call, no longer pending:   pytest tests/test_app.py::test_login -x "
    ]


def test_C8_spent_by_a_call_in_the_same_message_as_the_record() -> None:
    log = Log()
    log.turn("Fix login.")
    log.tool(
        "ok", name="bash", arguments='{"cmd": "make check"}', text=_record("Exact next action", "make check")
    )
    assert _ledger_of(log)["Exact next action"] == ["- No evidence observed."]


def test_C8_spent_not_when_the_tool_call_failed() -> None:
    log = Log()
    log.turn("Fix login.")
    log.say(_record("Exact next action", "make check"))
    log.tool("make: *** [check] Error 2", name="bash", arguments='{"cmd": "make check"}', status="error")
    sections = _ledger_of(log)
    assert sections["Exact next action"] == ["- make check"]
    assert sections["Verification evidence"] == ["- No evidence observed."]


def test_C8_spent_not_when_the_call_came_before_the_record() -> None:
    log = Log()
    log.turn("Fix login.")
    log.tool("3 failed", name="bash", arguments='{"cmd": "make check"}')
    log.say(f"Fixed the fixture; run it again.\n{_record('Exact next action', 'make check')}")
    assert _ledger_of(log)["Exact next action"] == ["- make check"]


def test_C8_spent_not_by_a_call_that_only_contains_the_payload() -> None:
    log = Log()
    log.turn("Fix login.")
    log.say(_record("Exact next action", "make check"))
    log.tool("ok", name="bash", arguments='{"cmd": "make check-fast"}')
    assert _ledger_of(log)["Exact next action"] == ["- make check"]


def test_C8_spent_records_under_the_other_six_headings_are_untouched() -> None:
    log = Log()
    log.turn("Fix login.")
    log.say(
        _record("Workspace mutations", "git commit -m fix") + "\n" + _record("Exact next action", "make lint")
    )
    log.say(_record("Exact next action", "make check"))
    log.tool("ok", name="bash", arguments='{"cmd": "git commit -m fix"}')
    sections = _ledger_of(log)
    assert sections["Workspace mutations"] == ["- git commit -m fix"]
    assert sections["Exact next action"] == ["- make check"]


def test_C8_newest_next_action_only_the_newest_of_two_is_kept() -> None:
    log = Log()
    log.turn("Fix login.")
    log.say(_record("Exact next action", "make lint"))
    log.tool("read", text="Reading first.")
    log.say(f"Plan changed.\n{_record('Exact next action', 'make check')}")
    sections = _ledger_of(log)
    assert sections["Exact next action"] == ["- make check"]
    assert "make lint" not in "\n".join(line for body in sections.values() for line in body)


def test_C8_newest_next_action_is_the_newest_unspent_one() -> None:
    log = Log()
    log.turn("Fix login.")
    log.say(_record("Exact next action", "make lint"))
    log.say(_record("Exact next action", "make check"))
    log.tool("ok", name="bash", arguments='{"cmd": "make check"}')
    sections = _ledger_of(log)
    assert sections["Exact next action"] == ["- make lint"]
    assert sections["Verification evidence"] == [
        "- Ran as a successful tool call, no longer pending: make check"
    ]


def test_C8_newest_next_action_a_restated_record_is_pending_again_after_it_ran() -> None:
    log = Log()
    log.turn("Fix login.")
    log.say(_record("Exact next action", "make check"))
    log.tool("ok", name="bash", arguments='{"cmd": "make check"}')
    log.say(f"The fixture changed; once more.\n{_record('Exact next action', 'make check')}")
    sections = _ledger_of(log)
    assert sections["Exact next action"] == ["- make check"]
    assert sections["Verification evidence"] == ["- No evidence observed."]


def test_C8_spent_the_carried_form_reads_back_as_spent_and_only_under_verification_evidence() -> None:
    note = "Ran as a successful tool call, no longer pending: "
    line = f"EXACT CONTINUATION RECORD [Verification evidence] :: {note}make check"
    record = ExactRecord("Verification evidence", "make check", spent=True)
    assert parse_record(line) == record and record.line() == line
    elsewhere = f"EXACT CONTINUATION RECORD [Exact next action] :: {note}x"
    assert parse_record(elsewhere) == ExactRecord("Exact next action", f"{note}x")
    longest = parse_record(f"EXACT CONTINUATION RECORD [Verification evidence] :: {note}" + "p" * 2048)
    assert longest is not None and longest.spent  # the 2,048-char limit is the payload's, not the note's


def test_C8_spent_a_model_line_quoting_it_or_restating_a_next_action_record_is_dropped() -> None:
    records = (
        ExactRecord("Verification evidence", "make check", spent=True),
        ExactRecord("Exact next action", "make lint"),
    )
    model = (
        "## Verification evidence\n- make check passed (12 tests)\n- the linter config is valid\n"
        "## Exact next action\n- run make check\n"
        "EXACT CONTINUATION RECORD [Exact next action] :: make format\n"
        "EXACT CONTINUATION RECORD [Decisions and rationale] :: keep the API\n"
    )
    sections = _sections(rebuild_ledger(model, records))
    assert sections["Verification evidence"] == [
        "- the linter config is valid",
        "- Ran as a successful tool call, no longer pending: make check",
    ]
    assert sections["Exact next action"] == [
        "EXACT CONTINUATION RECORD [Decisions and rationale] :: keep the API",
        "- make lint",
    ]


def _bash_log_with_a_spent_record() -> Log:
    log = Log()
    log.turn("Release.")
    log.say(f"Next: tag it.\n{_record('Exact next action', 'make release VERSION=1.2.3')}")
    log.tool("released 1.2.3", name="bash", arguments='{"cmd": "make release VERSION=1.2.3"}')
    log.say(f"Lint first.\n{_record('Exact next action', 'make lint')}")
    log.say(f"No: announce it.\n{_record('Exact next action', 'make announce')}")
    for n in range(12):
        log.tool(f"out {n} " + "r" * 2000)
    return log


def test_C8_spent_an_earlier_checkpoint_does_not_resurrect_a_spent_or_superseded_record() -> None:
    """Compaction 1 sees the call and carries the record as done; compaction 2's source has lost the
    records' lines and the call (only the summary's meta.record remains), and a careless model of
    compaction 1 echoed the spent and the superseded record in record form: neither comes back."""
    log = _bash_log_with_a_spent_record()
    blank = "<summary>\n" + "\n".join(f"## {h}\n- No evidence observed." for h in C7_HEADINGS)
    echo = (
        blank
        + "\nEXACT CONTINUATION RECORD [Exact next action] :: make release VERSION=1.2.3"
        + "\nEXACT CONTINUATION RECORD [Exact next action] :: make lint\n</summary>"
    )
    blank += "\n</summary>"
    service, _ = compactor(Reply(text=echo), Reply(text=blank))
    first = service.compact(request(log.state()))
    assert "EXACT CONTINUATION RECORD" not in text(first.replacement[0])  # the echoes were dropped
    assert first.replacement[0].meta.record == (
        "EXACT CONTINUATION RECORD [Verification evidence] :: "
        "Ran as a successful tool call, no longer pending: make release VERSION=1.2.3\n"
        "EXACT CONTINUATION RECORD [Exact next action] :: make announce"
    )
    for event in first.events:
        log.add(event)
    for n in range(12):
        log.tool(f"later {n} " + "s" * 2000)
    source = log.state().context
    later = [text_of(m) + "".join(c.arguments for c in m.tool_calls) for m in source[1:]]
    assert all("make release" not in t and "make lint" not in t for t in later)  # lines and call gone
    second = service.compact(request(log.state()))
    summary = _sections(text(second.replacement[0]).split("\n\n", 1)[1])
    assert summary["Exact next action"] == ["- make announce"]
    assert summary["Verification evidence"] == [
        "- Ran as a successful tool call, no longer pending: make release VERSION=1.2.3"
    ]


def test_C8_spent_the_fallback_ledger_shows_the_spent_record_as_done() -> None:
    log = _bash_log_with_a_spent_record()
    service, _ = compactor(http_error(400))
    outcome = service.compact(request(log.state()))
    assert outcome.strategy == "fallback"
    summary = text(outcome.replacement[0])
    assert summary.startswith(FALLBACK_NOTICE)
    sections = _sections(summary.split("\n\n", 1)[1])
    assert sections["Exact next action"] == ["- make announce"]
    assert sections["Verification evidence"] == [
        "- Ran as a successful tool call, no longer pending: make release VERSION=1.2.3"
    ]
    verify_checkpoint(log.state().context, outcome.checkpoint, COUNTER)
