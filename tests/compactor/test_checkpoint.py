"""The checkpoint event: K1 limits on write and replay, K3 effective context, audit re-derivation."""

from __future__ import annotations

import json

import crc32c
import pytest

from cairn.actors.compactor import AuditMismatch, rederive_replacement, source_hash, verify_checkpoint
from cairn.actors.compactor.fallback import plan_fallback
from cairn.actors.compactor.ledger import extract_records, record_texts
from cairn.actors.compactor.replacement import fallback_summary_message, summary_message
from cairn.actors.provider.scripted import http_error
from cairn.events.codec import GENESIS, Record, decode_line, encode_line
from cairn.events.errors import InputError, MalformedEvent, UnsupportedVersion
from cairn.events.kinds import CheckpointCommitted
from cairn.events.model import Message
from cairn.events.state import replay
from tests.compactor.builders import COUNTER, Log, coding_session, compactor, replace, request, text


def _checkpoint(messages: tuple[Message, ...] = (Message(role="user", content="s", id="m"),)):
    return CheckpointCommitted(
        version=1,
        epoch=1,
        through_seq=3,
        trigger="threshold",
        strategy="fallback",
        source_tokens=10,
        replacement_tokens=5,
        replacement_messages=messages,
    )


def _line(event) -> bytes:
    return encode_line(pos=0, sid="s1", seq=1, ts=1, prev=GENESIS, event=event)[0]


def _tampered(line: bytes, change) -> bytes:
    """The same line with its event body changed and a fresh, valid crc: only K1 can refuse it."""
    obj = json.loads(line)
    del obj["crc"]
    change(obj["event"])
    prefix = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()[:-1]
    return b'%s,"crc":"%08x"}\n' % (prefix, crc32c.crc32c(prefix))


def test_K1_4097_messages_are_refused_on_write_and_on_replay() -> None:
    message = Message(role="user", content="m", id="m")
    with pytest.raises(ValueError, match=r"1\.\.4096"):
        _checkpoint((message,) * 4097)
    assert len(_checkpoint((message,) * 4096).replacement_messages) == 4096
    line = _tampered(_line(_checkpoint()), lambda e: e.update(replacement_messages=[{"role": "user"}] * 4097))
    with pytest.raises(MalformedEvent, match="4096"):
        decode_line(line)
    with pytest.raises(ValueError):
        _checkpoint(())


def test_K1_over_16_mib_is_refused_on_write_and_on_replay() -> None:
    envelope = len(b'[{"role":"user","content":""}]')  # the replacement's JSON around the text
    exactly = "h" * (16_777_216 - envelope)  # K1: at most 16 MiB encoded, stated literally
    assert len(_checkpoint((Message(role="user", content=exactly),)).replacement_messages) == 1
    huge = exactly + "h"
    with pytest.raises(ValueError, match="bytes"):
        _checkpoint((Message(role="user", content=huge),))
    line = _tampered(_line(_checkpoint()), lambda e: e["replacement_messages"][0].update(content=huge))
    with pytest.raises(MalformedEvent, match="bytes"):
        decode_line(line)


def test_K1_bad_shapes_and_unknown_versions_are_refused() -> None:
    with pytest.raises(ValueError, match="tool_call_id"):
        _checkpoint((Message(role="tool", content="orphan"),))
    with pytest.raises(ValueError, match="version"):
        replace(_checkpoint(), version=2)
    line = _tampered(_line(_checkpoint()), lambda e: e.update(version=2))
    with pytest.raises(UnsupportedVersion, match="version") as caught:
        decode_line(line)
    assert isinstance(caught.value, InputError)
    good = decode_line(_line(_checkpoint()))
    assert good.event == _checkpoint()


def test_K1_a_service_checkpoint_round_trips_through_the_codec() -> None:
    for outcome_plan in ((), (http_error(400),)):
        service, _ = compactor(*outcome_plan)
        checkpoint = service.compact(request(coding_session(12).state())).checkpoint
        assert decode_line(_line(checkpoint)).event == checkpoint


def test_K3_effective_context_after_replay_is_replacement_plus_later_messages() -> None:
    log = coding_session(12)
    state = log.state()
    service, _ = compactor()
    checkpoint = service.compact(request(state)).checkpoint
    log.add(checkpoint)
    log.user("one more thing")
    lines = [
        encode_line(pos=r.pos, sid=r.sid, seq=r.seq, ts=r.ts, prev=r.prev, event=r.event)[0]
        for r in log.records
    ]
    replayed = replay(decode_line(line) for line in lines)
    assert replayed.context[: len(checkpoint.replacement_messages)] == checkpoint.replacement_messages
    later = replayed.context[len(checkpoint.replacement_messages) :]
    assert [m.id for m in later] == [log.records[-1].event.message_id]
    from_checkpoint = replay(log.records[-2:], state=replace(state, context=()))
    assert from_checkpoint.context == replayed.context
    assert replayed.epoch == 1 and replayed.carried.revision == state.carried.revision + 1


@pytest.mark.parametrize("plan", [(), (http_error(503),) * 3], ids=["llm", "fallback"])
def test_K3_an_auditor_rederives_the_replacement_without_a_model(plan) -> None:
    state = coding_session(14).state()
    service, provider = compactor(*plan)
    checkpoint = service.compact(request(state)).checkpoint
    calls = provider.calls
    assert checkpoint.source_hash == source_hash(state.context)
    assert rederive_replacement(state.context, checkpoint, COUNTER) == checkpoint.replacement_messages
    verify_checkpoint(state.context, checkpoint, COUNTER)
    assert provider.calls == calls  # no model was asked
    with pytest.raises(AuditMismatch):
        verify_checkpoint(state.context[:-1], checkpoint, COUNTER)
    if checkpoint.raw_summary is not None:
        forged = replace(checkpoint, raw_summary=checkpoint.raw_summary.replace("Fix", "Break"))
        with pytest.raises(AuditMismatch):
            verify_checkpoint(state.context, forged, COUNTER)


def test_K3_checkpoint_records_what_an_auditor_needs() -> None:
    state = coding_session(12).state()
    service, _ = compactor()
    checkpoint = service.compact(request(state, now_ms=123)).checkpoint
    assert checkpoint.prompt_version and checkpoint.raw_summary and "<summary>" in checkpoint.raw_summary
    assert checkpoint.source_tokens == COUNTER.messages(state.context)
    assert checkpoint.replacement_tokens == COUNTER.messages(checkpoint.replacement_messages)
    assert checkpoint.diagnostics.target_tokens > 0 and checkpoint.diagnostics.breaker == "closed"
    assert checkpoint.carried.open_turn == state.carried.open_turn
    record = Record(0, "s1", 1, 1, GENESIS, checkpoint)
    assert record.kind == "checkpoint-committed"


def _spent_record_log() -> Log:
    log = Log()
    log.turn("Release.")
    log.say("EXACT CONTINUATION RECORD [Exact next action] :: make release")
    log.tool("released", name="bash", arguments='{"cmd": "make release"}')
    for n in range(12):
        log.tool(f"out {n} " + "r" * 2000)
    return log


@pytest.mark.parametrize("plan", [(), (http_error(400),)], ids=["llm", "fallback"])
def test_C8_spent_a_checkpoint_built_before_the_rule_rederives_without_it(plan) -> None:
    """The spent rule is part of the ledger contract `prompt_version` names: a checkpoint of
    cairn-ledger-2 (C8 alone) re-derives with the spent record as the next action, as it was built."""
    source = _spent_record_log().state().context
    service, _ = compactor(*plan)
    checkpoint = service.compact(request(_spent_record_log().state())).checkpoint
    assert checkpoint.prompt_version == "cairn-ledger-3"
    verify_checkpoint(source, checkpoint, COUNTER)
    assert "- make release" not in text(checkpoint.replacement_messages[0])
    older = replace(checkpoint, prompt_version="cairn-ledger-2")
    with pytest.raises(AuditMismatch):  # C8 alone gives another ledger
        verify_checkpoint(source, older, COUNTER)
    records = extract_records(record_texts(source)).records
    if checkpoint.strategy == "llm":
        assert checkpoint.raw_summary is not None
        summary = summary_message(checkpoint.raw_summary, records, "ckpt-1-summary", spent_rule=False)
        replacement = (summary, *checkpoint.replacement_messages[1:])
    else:
        replacement = plan_fallback(
            source,
            summary=fallback_summary_message(records, "ckpt-1-summary"),
            task_message=checkpoint.replacement_messages[-1],
            task="Release.",
            target=checkpoint.diagnostics.target_tokens,
            counter=COUNTER,
        ).replacement
    next_action = text(replacement[0]).split("## Exact next action\n", 1)[1].split("\n\n## ", 1)[0]
    assert "- make release" in next_action.splitlines()
    built = replace(older, replacement_messages=replacement, replacement_tokens=COUNTER.messages(replacement))
    verify_checkpoint(source, built, COUNTER)
