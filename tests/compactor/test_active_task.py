"""The active-task checkpoint (C11)."""

from __future__ import annotations

from cairn.actors.compactor.active_task import active_task_message, clip_task, task_text
from cairn.events.kinds import OpenTurn
from tests.compactor.builders import coding_session, compactor, request, text


def test_C11_task_up_to_6000_chars_is_verbatim_longer_is_head_marker_tail() -> None:
    exact = "a" * 6000
    assert clip_task(exact) == exact
    long = "H" * 4500 + "m" * 2000 + "T" * 1500
    clipped = clip_task(long)
    assert clipped.startswith("H" * 4500 + "\n[...") and clipped.endswith("]\n" + "T" * 1500)
    assert "m" not in clipped.replace("omitted", "")


def test_C11_reminder_is_hidden_and_says_request_not_status() -> None:
    assert task_text(None) == "" and active_task_message("", "x") is None
    turn = OpenTurn("t1", 3, ("Do the thing.", "", "Also reply in JSON."))
    message = active_task_message(task_text(turn), "ckpt-1-task")
    assert message is not None and message.meta.hidden and message.meta.origin == "active-task"
    body = text(message)
    assert "Do the thing.\n\nAlso reply in JSON." in body
    assert "not a report of how far it got" in body and "follow it literally" in body


def test_C11_a_second_compaction_keeps_one_fresh_task_reminder() -> None:
    log = coding_session(12)
    service, _ = compactor()
    first = service.compact(request(log.state()))
    for event in first.events:
        log.add(event)
    log.say("still working")
    second = service.compact(request(log.state()))
    origins = [m.meta.origin for m in second.replacement]
    assert origins.count("active-task") == 1 and origins[-1] == "active-task"
