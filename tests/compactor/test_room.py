"""The room rule (beyond C10, `gates.room_for`): a checkpoint leaves room below the compaction threshold
for two turns of the session's recent median growth, wherever even the smallest replacement can; where
it cannot, the checkpoint says so (`room_missed`)."""

from __future__ import annotations

import pytest

from cairn.actors.compactor import AuditMismatch, verify_checkpoint
from cairn.actors.compactor.gates import median_growth, provider_permille, room_for, starts_turn, turn_sizes
from cairn.events.kinds import Request, Usage
from cairn.events.model import Message, MessageMeta
from tests.compactor.builders import COUNTER, Log, compactor, replace, request


def _m(role: str, origin: str = "") -> Message:
    return Message(role=role, content="x", meta=MessageMeta(origin=origin))  # type: ignore[arg-type]


def test_C10_room_turns_run_from_a_users_message_to_the_next_and_the_open_turn_is_not_one() -> None:
    source = [
        _m("user", "summary"),  # cairn's, not a turn
        _m("assistant"),
        _m("user"), _m("assistant"), _m("tool"),  # 3
        _m("user"), _m("assistant"),  # 2
        _m("user"), _m("assistant"), _m("assistant"), _m("assistant"),  # 4
        _m("user", "active-task"),  # cairn's: inside the turn above
        _m("user"), _m("assistant"),  # the open turn
    ]  # fmt: skip
    assert not starts_turn(source[0]) and starts_turn(source[2])
    assert turn_sizes(source, len) == [3, 2, 5]
    assert turn_sizes(source, len, last=2) == [2, 5]
    assert median_growth([3, 2, 5]) == 3
    assert median_growth([4, 1, 3, 2]) == 2  # the lower middle of an even count
    assert median_growth([]) is None


def test_C10_room_is_the_threshold_less_the_fixed_part_and_two_turns() -> None:
    # budget 10,000: threshold 8,000; fixed 500; growth 1,000 -> 8,000 - 500 - 2 x 1,000
    assert room_for(10_000, 500, 1_000) == 5_500
    assert room_for(7_808, 0, 1_400) == 3_446  # a 16,000 window's budget (reserve 8,192)
    assert room_for(None, 500, 1_000) == 0 and room_for(10_000, 500, None) == 0  # no rule
    assert room_for(10_000, 500, 5_000) == 1  # used up: no replacement fits


def test_C10_room_is_taken_in_cairns_count_where_the_provider_counts_more() -> None:
    # the provider counts 1,200 per 1,000 of cairn's: the threshold 8,000 is 6,666 in cairn's count
    assert provider_permille(2_522, 2_099) == 1_201  # llama.cpp with SmolLM2 against cl100k
    assert room_for(10_000, 500, 1_000, 1_200) == 6_666 - 500 - 2_000 == 4_166
    assert room_for(10_000, 500, 1_000, 900) == 5_500  # counting less leaves the rule as it was
    assert room_for(10_000, 500, 1_000, 5_000) == 4_000 - 2_500 == 1_500  # taken as at most 2,000
    assert room_for(10_000, 500, 1_000, None) == 5_500
    assert provider_permille(None, 2_099) is None and provider_permille(2_522, 0) is None


def _turns(count: int, words: int, *, window: int) -> Log:
    log = Log(window=window)
    for n in range(count):
        log.turn(f"Task {n}: look at module {n}.")
        log.tool(" ".join(f"word{n}x{i}" for i in range(words)))
        log.say(f"Module {n} looked at.")
    log.turn("Now the last task.")  # the open turn
    return log


def test_C10_room_caps_the_target_so_a_checkpoint_leaves_two_turns_of_room() -> None:
    """A 16,000-token window (budget 7,808, threshold 6,246, C10's capped target 3,904) whose turns
    grow by about 1,400 tokens: the target becomes the room, 6,246 - 2 x growth, and the fallback
    meets it."""
    state = _turns(4, 350, window=16_000).state()
    growth = median_growth(turn_sizes(state.context, COUNTER.messages))
    assert growth is not None and 1_000 < growth < 2_000
    service, _ = compactor()  # the scripted summary
    checkpoint = service.compact(request(state)).checkpoint
    room = 6_246 - 2 * growth
    assert checkpoint.diagnostics.room_tokens == room
    assert checkpoint.diagnostics.target_tokens == room < 3_904
    assert checkpoint.replacement_tokens <= room and not checkpoint.diagnostics.room_missed


def _counted(log: Log, *, cairn: int, provider: int) -> None:
    """The last request as cairn counted it (`counted_tokens`) and its usage as the provider did."""
    log.add(
        Request(
            request_id="last", turn_id="t", attempt=1, fingerprint="f", history_revision=0,
            projected_tokens=cairn, phase="normal", message_count=3, history_length=3,
            counted_tokens=cairn,
        )
    )  # fmt: skip
    log.add(Usage(request_id="last", prompt_tokens=provider, completion_tokens=10))


def test_C10_room_of_a_provider_that_counts_a_fifth_more_leaves_room_in_its_count_too() -> None:
    """The same session as above, its last request counted 5,000 by cairn and 6,000 by the provider
    (1,200 per 1,000): the room is 6,246 x 1,000 / 1,200 = 5,205 - 2 x growth, so the next requests,
    counted by the provider, stay under its threshold for two turns. Before: the room was the
    threshold in cairn's count, and on llama.cpp with SmolLM2 (a fifth more) a session compacted on
    the turn right after a checkpoint."""
    log = _turns(4, 350, window=16_000)
    _counted(log, cairn=5_000, provider=6_000)
    state = log.state()
    growth = median_growth(turn_sizes(state.context, COUNTER.messages))
    assert growth is not None
    checkpoint = compactor()[0].compact(request(state)).checkpoint
    assert checkpoint.diagnostics.room_tokens == 6_246 * 1_000 // 1_200 - 2 * growth
    assert checkpoint.replacement_tokens <= checkpoint.diagnostics.target_tokens
    assert checkpoint.replacement_tokens * 1_200 // 1_000 + 2 * growth <= 6_246
    older = _turns(4, 350, window=16_000)  # a log from before `counted_tokens`: the rule as it was
    older.add(Request(request_id="last", turn_id="t", attempt=1, fingerprint="f", history_revision=0,
                      projected_tokens=5_000, phase="normal", message_count=3))  # fmt: skip
    older.add(Usage(request_id="last", prompt_tokens=6_000))
    unscaled = compactor()[0].compact(request(older.state())).checkpoint
    assert unscaled.diagnostics.room_tokens == 6_246 - 2 * growth


def test_C10_room_that_no_replacement_can_leave_keeps_c10s_target_and_says_so() -> None:
    """Turns of about 3,000 tokens in the same window: two of them leave 144 tokens below the
    threshold, less than the fallback's notice and task, so the target stays C10's and the
    checkpoint records that it missed the room."""
    state = _turns(2, 750, window=16_000).state()
    assert median_growth(turn_sizes(state.context, COUNTER.messages)) == 3_051
    service, _ = compactor()
    checkpoint = service.compact(request(state)).checkpoint
    assert checkpoint.diagnostics.room_tokens == 6_246 - 2 * 3_051 == 144
    assert checkpoint.diagnostics.target_tokens == min(3_904, checkpoint.source_tokens * 8 // 10)
    assert checkpoint.diagnostics.room_missed


def test_C10_room_has_no_rule_without_a_complete_turn() -> None:
    log = Log(window=16_000)
    log.turn("One long task.")
    for n in range(6):
        log.tool(" ".join(f"w{n}x{i}" for i in range(500)))
    checkpoint = compactor()[0].compact(request(log.state())).checkpoint
    assert checkpoint.diagnostics.room_tokens == 0 and not checkpoint.diagnostics.room_missed


def test_C9_fitted_a_summary_whose_tail_is_over_target_keeps_the_tail_that_fits() -> None:
    """Beyond C9: the newest 20 % of the source carries a 30,000-char tool output, so the C9
    replacement is over C10's target; the model's summary is kept with the tail fitted as the
    fallback fits its own (the big output cut), and an auditor re-derives it."""
    log = Log(window=16_000)
    log.turn("Fix the parser.")
    for n in range(8):
        log.tool(" ".join(f"line{n}x{i}" for i in range(120)))
    log.tool(" ".join(f"big{i}" for i in range(15_000)))
    state = log.state()
    service, _ = compactor()
    outcome = service.compact(request(state))
    checkpoint = outcome.checkpoint
    assert checkpoint.strategy == "llm" and outcome.failure is None
    assert checkpoint.diagnostics.tail_fitted and checkpoint.files_restored == ()
    assert checkpoint.replacement_tokens <= checkpoint.diagnostics.target_tokens
    assert checkpoint.replacement_messages[0].meta.origin == "summary"
    assert checkpoint.replacement_messages[-1].meta.origin == "active-task"
    verify_checkpoint(state.context, checkpoint, COUNTER)
    unfitted = replace(checkpoint, diagnostics=replace(checkpoint.diagnostics, tail_fitted=False))
    with pytest.raises(AuditMismatch):
        verify_checkpoint(state.context, unfitted, COUNTER)
