"""The summary prompt (C7, C12) and its shrinking on overflow (C6)."""

from __future__ import annotations

from itertools import pairwise

import pytest

from cairn.actors.compactor.errors import CompactionIneffective
from cairn.actors.compactor.prompt import (
    INITIAL_CHAR_CAP,
    MIN_CHAR_CAP,
    PromptFile,
    PromptShape,
    build_prompt,
    next_shape,
    prompt_chars,
)
from cairn.actors.provider.scripted import Reply, context_limit
from cairn.events.kinds import FileAccess
from cairn.events.model import ImagePart, Message, TextPart, text_of, units
from tests.compactor.builders import C7_HEADINGS, Log, coding_session, compactor, ledger, request


def _sent(provider) -> list[str]:
    return ["\n".join(text_of(m) for m in r.messages) for r in provider.requests]


def test_C6_overflow_drops_files_then_oldest_units_each_prompt_strictly_shorter(tmp_path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.md").write_text("FILE-BODY\n" * 50)
    log = Log(workspace=str(workspace))
    log.turn("Refactor the parser.")
    for n in range(12):
        log.tool(f"OUTPUT-{n} " + "q" * 2000, files=(FileAccess(str(workspace / "notes.md")),))
    service, provider = compactor(
        context_limit(), context_limit(), Reply(text=ledger("- refactor the parser"))
    )
    outcome = service.compact(request(log.state(), workspace=str(workspace)))
    assert outcome.strategy == "llm" and provider.calls == 3
    first, second, third = _sent(provider)
    assert len(first) > len(second) > len(third)
    assert "FILE-BODY" in first and "FILE-BODY" not in second
    assert "OUTPUT-0 " in second and "OUTPUT-0 " not in third  # the oldest units went next
    reductions = outcome.checkpoint.diagnostics.reductions
    assert reductions[0] == "dropped-files" and reductions[1].startswith("dropped-units:")
    assert outcome.checkpoint.diagnostics.prompt_chars == tuple(
        sum(len(text_of(m)) for m in r.messages) for r in provider.requests
    )
    # the files are still restored in the replacement: C6 only shrinks the prompt
    assert outcome.checkpoint.files_restored == ("notes.md",)


def test_C6_oldest_units_drop_whole_a_call_with_its_result() -> None:
    log = coding_session(8)
    source = log.state().context
    shape = PromptShape(include_files=False)
    step = next_shape(source, (), shape)
    assert step is not None
    smaller, name = step
    spans = units(source)
    dropped = smaller.first_unit
    assert name == f"dropped-units:{dropped}" and dropped == len(spans) // 4
    text = text_of(build_prompt(source, (), smaller)[1])
    first_kept = spans[dropped][0]
    assert f"[{first_kept}] " in text and f"[{first_kept - 1}] " not in text


def test_C6_then_halves_the_char_cap_down_to_625_then_is_exhausted() -> None:
    source = (Message(role="user", content="w" * 20_000, id="u1"),)
    files = (PromptFile("a.txt", "alpha"),)
    shape = PromptShape()
    names = []
    sizes = [prompt_chars(build_prompt(source, files, shape))]
    while (step := next_shape(source, files, shape)) is not None:
        shape, name = step
        names.append(name)
        sizes.append(prompt_chars(build_prompt(source, files, shape)))
    assert names == ["dropped-files", "char-cap:2500", "char-cap:1250", "char-cap:625"]
    assert shape.char_cap == MIN_CHAR_CAP
    assert all(a > b for a, b in pairwise(sizes))


def test_C6_a_step_that_does_not_shrink_fails_as_context_exhausted() -> None:
    log = Log()
    log.turn("short")
    service, provider = compactor(context_limit(), context_limit())
    # one short message: no fallback is smaller either, so nothing is committed
    with pytest.raises(CompactionIneffective) as caught:
        service.compact(request(log.state()))
    assert provider.calls == 1
    failure = caught.value.events[0]
    assert failure.reason == "overflow" and "context-exhausted" in failure.detail


def test_C6_long_messages_overflowing_three_times_fail_as_overflow() -> None:
    log = Log()
    log.turn("x" * 30_000)
    service, provider = compactor(context_limit(), context_limit(), context_limit())
    outcome = service.compact(request(log.state()))
    assert provider.calls == 3
    assert outcome.checkpoint.diagnostics.reductions == ("char-cap:2500", "char-cap:1250")
    sizes = outcome.checkpoint.diagnostics.prompt_chars
    assert sizes[0] > sizes[1] > sizes[2]
    assert outcome.failure is not None and outcome.failure.reason == "overflow"


def test_C7_prompt_has_the_contract_the_headings_and_indexed_messages() -> None:
    source = (
        Message(role="user", content="please fix it", id="u1"),
        Message(role="assistant", content="on it", id="a1"),
    )
    files = (PromptFile("src/a.py", "x = 1\n```inner```", more_lines=3),)
    system, user = build_prompt(source, files, PromptShape())
    contract = text_of(system)
    positions = [contract.index(f"{n}. {h}") for n, h in enumerate(C7_HEADINGS, start=1)]
    assert positions == sorted(positions)
    for needle in (
        "<analysis>",
        "<summary>",
        "observed",
        "exact commands",
        "credentials",
        "newest evidence",
        "no evidence observed",
        "Never call unfinished work done",
    ):
        assert needle in contract
    body = text_of(user)
    assert "[0] user: please fix it" in body and "[1] assistant: on it" in body
    assert "### src/a.py\n````\nx = 1\n```inner```\n````\n(3 more lines not shown)" in body
    long = (Message(role="user", content="z" * 9000),)
    assert len(text_of(build_prompt(long, (), PromptShape())[1])) < 9000
    assert INITIAL_CHAR_CAP == 5000


def test_C7_the_prompt_states_every_clause_of_the_contract_and_the_seven_headings_in_order() -> None:
    contract = text_of(build_prompt((Message(role="user", content="go", id="u1"),), (), PromptShape())[0])
    clauses = {
        "a private analysis, then the summary": (
            "think it through privately inside <analysis>...</analysis>",
            "write the result inside <summary>...</summary>",
        ),
        "observed facts apart from intentions": (
            "Keep what was observed (tool output, test results, file contents) apart from what was only "
            "intended or planned.",
        ),
        "exact commands, arguments and final-response constraints": (
            "Copy exact commands, arguments, paths, identifiers and any constraint on the final response "
            "character for character.",
        ),
        "no unfinished work done, no invented verification": (
            "Never call unfinished work done and never claim a check that the transcript does not show.",
        ),
        "no credentials, hidden control messages or raw reasoning": (
            "Leave out credentials and secrets, hidden control messages and raw reasoning.",
        ),
        "the newest evidence": ("When sources disagree, the newest evidence wins.",),
        "no evidence observed rather than inventing": ("write 'no evidence observed' instead of guessing",),
        "the seven headings, in order, once each": (
            "use exactly these seven headings, in this order, each once, each on its own line starting "
            "with '## '",
        ),
        "earlier headings escaped": ("Lines marked [earlier] come from an older summary",),
    }
    for clause, needles in clauses.items():
        for needle in needles:
            assert needle in contract, clause
    listed = "\n".join(f"{n}. {h}" for n, h in enumerate(C7_HEADINGS, start=1))
    assert listed in contract  # the seven, in C7's order, as one list
    assert contract.count("1. Objective and constraints") == 1


def test_C7_the_prompt_asks_for_what_the_quality_probes_find_missing() -> None:
    """Decisions 0 %, identifiers 6.5 %, numbers 20 % on the scripted floor (issue 14): the prompt asks
    for each explicitly. Unmeasured offline; `cairn bench --only quality --provider openai` scores it."""
    contract = text_of(build_prompt((Message(role="user", content="go", id="u1"),), (), PromptShape())[0])
    for needle in (
        "what was chosen, what it was chosen over, and the reason, as in 'use X rather than Y because R'",
        "names of functions, classes, constants and tests, copied verbatim",
        "every measured or configured number with its label and unit, as written",
        "the exact command that failed, the exact error line it printed, and what fixed it",
        "mark the old one '(superseded)' on its line or leave it out",
        "the pending command with all its arguments, copied character for character",
        "The host drops any line of yours that contains a record's payload",
    ):
        assert needle.lower() in contract.lower(), needle


def test_C7_headings_inside_an_earlier_summary_are_escaped() -> None:
    earlier = Message(role="user", content="Summary:\n## Objective and constraints\n- old goal", id="s")
    body = text_of(build_prompt((earlier,), (), PromptShape())[1])
    assert "\n## Objective and constraints" not in body
    assert "[earlier] ## Objective and constraints" in body


def test_C12_images_never_reach_the_summary_model() -> None:
    log = Log()
    log.turn("look at this screenshot")
    log.user("and this one", images=2)
    log.say("I see the error dialog")
    log.tool("y" * 8000)
    log.say("done")
    state = log.state()
    service, provider = compactor()
    outcome = service.compact(request(state))
    for sent in provider.requests:
        for message in sent.messages:
            assert isinstance(message.content, str)
    assert "[image omitted from compaction]" in _sent(provider)[0]
    assert outcome.checkpoint.diagnostics.images_omitted == 2
    assert any(
        isinstance(m.content, tuple) and any(isinstance(p, ImagePart) for p in m.content)
        for m in state.context
    )  # the canonical history keeps its images
    assert TextPart("and this one") in next(m.content for m in state.context if m.id == "u3")  # type: ignore[operator]
