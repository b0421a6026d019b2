"""What SmolLM2-135M on llama.cpp's server really answered (issue 32 point 5), replayed through the real
OpenAI adapter from streams recorded once (`tests/fixtures/record_smollm2.py`): summaries in free
text with none of the seven headings, with one heading and the rest run into its bullets, with the
seven as a bare numbered list, or copying back the transcript it was given; a JSON ledger cut
mid-object by the output cap, and one longer than the source it summarises; an empty reply; and a
turn where the model, offered a tool, writes code instead of calling it. Never a crash or a loop: a
failed summary with its reason and the fallback, a typed error when nothing can shrink, a finished
turn."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn import Host, SessionSettings, TurnResult, WorkspaceTools
from cairn.actors.compactor import CompactionIneffective, Compactor, verify_checkpoint
from cairn.actors.provider.config import OpenAIConfig
from cairn.actors.provider.openai_compat import OpenAIProvider
from cairn.events.codec import Record
from cairn.events.kinds import CompactionFailed, SessionStarted, ToolResult
from tests.compactor.builders import COUNTER, Log, coding_session, request
from tests.provider.chat_server import ChatServer, Sse, call_start, chunk, text_reply

FIXTURES = Path(__file__).parents[1] / "fixtures" / "smollm2"


def recorded(name: str, where: Path = FIXTURES) -> Sse:
    """A recorded stream, its `data:` events sent as the server sent them."""
    lines = (where / f"{name}.sse").read_text().splitlines()
    return Sse(tuple(f"{line}\n\n" for line in lines if line.startswith("data: ")))


@pytest.fixture
def chat() -> Iterator[ChatServer]:
    with ChatServer() as server:
        yield server


def _session_with_cap(cap: int, rounds: int = 6, output_chars: int = 600) -> Log:
    """The builders' coding session, started with an output cap (the summary asks for no more)."""
    log = coding_session(rounds, output_chars=output_chars)
    first = log.records[0]
    assert isinstance(first.event, SessionStarted)
    started = SessionStarted(workspace="/ws", model="m", context_window=100_000, max_output_tokens=cap)
    log.records[0] = Record(first.pos, first.sid, first.seq, first.ts, first.prev, started)
    return log


def _compact(chat: ChatServer, cap: int, mode: str, rounds: int = 6, output_chars: int = 600):
    provider = OpenAIProvider(OpenAIConfig(base_url=chat.url, model="smollm2", structured_summary=mode))  # type: ignore[arg-type]
    with provider:
        state = _session_with_cap(cap, rounds, output_chars).state()
        outcome = Compactor(provider, model="smollm2", sleep=lambda _s: None, counter=COUNTER).compact(
            request(state)
        )
    verify_checkpoint(state.context, outcome.checkpoint, COUNTER)
    return outcome


def test_C7_smollm2s_free_text_summary_has_no_heading_and_the_fallback_takes_over(chat: ChatServer) -> None:
    """Asked for C7's headings in free text, it wrote a numbered list ('# 1.' ... '# 68') to its
    400-token cap: refused as malformed at once (not retried, C5), the fallback compacts."""
    chat.plan(recorded("summary_text"))
    outcome = _compact(chat, 400, "off")
    failure = outcome.failure
    assert isinstance(failure, CompactionFailed) and failure.reason == "malformed"
    assert "has none of the seven ledger headings (C7)" in failure.detail
    assert outcome.checkpoint.strategy == "fallback" and len(chat.requests) == 1


def test_C7_smollm2s_json_ledger_cut_mid_object_by_its_cap_is_malformed_with_that_reason(
    chat: ChatServer,
) -> None:
    """Its JSON ledger stopped at the 40 tokens it was allowed ('"1.1.1.1...'): malformed, 'cut
    short by the output limit', one call, the fallback."""
    chat.plan(recorded("summary_json_cut"))
    outcome = _compact(chat, 40, "on")
    failure = outcome.failure
    assert isinstance(failure, CompactionFailed) and failure.reason == "malformed"
    assert "cut short by the output limit (finish 'length')" in failure.detail
    assert outcome.checkpoint.strategy == "fallback" and len(chat.requests) == 1


def test_C7_smollm2s_summary_with_one_heading_and_the_rest_in_its_bullets_is_malformed_naming_six(
    chat: ChatServer,
) -> None:
    """'1. Objective and constraints:' as a heading, then bullets that start 'Exact next action:' or
    end 'under Decisions and rationale': a heading is a line of its own, so six are missing, named
    in the failure; one call (C5 does not retry a malformed reply), the fallback compacts."""
    chat.plan(recorded("summary_one_heading"))
    outcome = _compact(chat, 300, "off")
    failure = outcome.failure
    assert isinstance(failure, CompactionFailed) and failure.reason == "malformed"
    assert "lacks 6 of the seven ledger headings (C7): 'Decisions and rationale'," in failure.detail
    assert "'Exact next action'" in failure.detail and "'Objective and constraints'" not in failure.detail
    assert outcome.checkpoint.strategy == "fallback" and len(chat.requests) == 1


def test_C7_gemma3s_headings_repeated_with_one_ending_in_a_period_is_malformed(chat: ChatServer) -> None:
    """Gemma 3 270M (the base model, `cairn local-model --model gemma3-270m`: the same server, and
    the request of SmolLM2's `summary_headings_only` with seed 3, recorded once; its GGUF carries no
    chat template, so the server used ChatML): it copied part of the transcript
    and then the prompt's heading list twice, '1. Objective and constraints' ... '7. Exact next
    action.'. Six headings are found (repeats are allowed, C7); the seventh, with its period, is
    not a heading line, so the reply lacks it: malformed, naming it, and the fallback compacts."""
    chat.plan(recorded("summary_repeated_headings", FIXTURES.parent / "gemma3"))
    outcome = _compact(chat, 300, "off")
    failure = outcome.failure
    assert isinstance(failure, CompactionFailed) and failure.reason == "malformed"
    assert failure.detail.endswith("lacks 1 of the seven ledger headings (C7): 'Exact next action'")
    assert outcome.checkpoint.strategy == "fallback" and len(chat.requests) == 1


def test_C7_smollm2s_reply_that_copies_its_prompt_back_is_malformed(chat: ChatServer) -> None:
    """It answered with the transcript it was asked to summarise ('[0] user: Fix the failing
    test...', the tool output after it), then 'Here is the summary with seven headings:' and none:
    malformed, the fallback compacts, nothing of the copy is committed."""
    chat.plan(recorded("summary_repeats_prompt"))
    outcome = _compact(chat, 300, "off")
    failure = outcome.failure
    assert isinstance(failure, CompactionFailed) and failure.reason == "malformed"
    assert "has none of the seven ledger headings (C7)" in failure.detail
    assert outcome.checkpoint.strategy == "fallback" and len(chat.requests) == 1
    assert outcome.checkpoint.raw_summary is None


def test_C7_smollm2s_seven_bare_headings_are_refused_as_ungrounded_and_the_fallback_committed(
    chat: ChatServer,
) -> None:
    """'1. Objective and constraints' ... '7. Exact next action' with nothing of the transcript
    under them: C7's seven headings are there, but its own two lines ('The 80-line ...') share no
    word with the transcript (beyond C7, `grounding`). Before the grounding gate this reply was the
    checkpoint of an 855-token source (383 tokens, the history replaced by a list of headings); now
    it is `malformed` after one call, and the fallback keeps the newest units verbatim."""
    chat.plan(recorded("summary_headings_only"))
    outcome = _compact(chat, 300, "off")
    failure = outcome.failure
    assert isinstance(failure, CompactionFailed) and failure.reason == "malformed"
    assert failure.detail.startswith("ungrounded: 0 of 2 distinct lines share a word with the transcript")
    assert outcome.checkpoint.strategy == "fallback" and outcome.checkpoint.source_tokens == 855
    assert len(chat.requests) == 1


def test_C7_smollm2s_json_ledger_of_filler_is_refused_as_ungrounded(chat: ChatServer) -> None:
    """A JSON ledger of seven fields of filler ('def ', 'ref<name>') padded with whitespace, 226
    output tokens: valid JSON with the seven fields, so C7's shape holds, but its eight lines are
    three, repeated (`grounding`: repetitive), and none shares a word with the transcript. Over an
    82-token source neither it nor the fallback could shrink
    the source: a typed `CompactionIneffective` carrying both failures (the model's first, for the
    breaker), nothing committed. Over a 409-token source, where it used to be the checkpoint (318
    tokens of filler), the fallback is committed instead."""
    usage = (FIXTURES / "summary_json_longer_than_source.sse").read_text()
    assert '"completion_tokens":226' in usage
    chat.plan(recorded("summary_json_longer_than_source"))
    with pytest.raises(CompactionIneffective) as refused:
        _compact(chat, 512, "on", rounds=1, output_chars=80)
    reasons = [(e.reason, e.detail) for e in refused.value.events]
    assert [reason for reason, _ in reasons] == ["malformed", "insufficient-reduction"]
    assert reasons[0][1] == "repetitive: 8 lines of its own, 3 distinct (more than half repeat another line)"
    assert len(chat.requests) == 1

    chat.plan(recorded("summary_json_longer_than_source"))
    outcome = _compact(chat, 512, "on", rounds=4, output_chars=300)
    failure = outcome.failure
    assert isinstance(failure, CompactionFailed) and failure.reason == "malformed"
    assert outcome.checkpoint.strategy == "fallback" and outcome.checkpoint.source_tokens == 409


def test_C5_smollm2s_empty_reply_is_asked_again_three_calls_then_the_fallback(chat: ChatServer) -> None:
    """The server's stream of an empty reply (a role chunk, finish `stop`, usage of one token):
    blank, so C5 asks again; three blanks and the fallback compacts, the failure says `empty`."""
    for _ in range(3):
        chat.plan(recorded("reply_empty"))
    outcome = _compact(chat, 300, "on")
    failure = outcome.failure
    assert isinstance(failure, CompactionFailed) and failure.reason == "empty"
    assert failure.detail == "the reply had no summary" and failure.attempt == 3
    assert outcome.checkpoint.strategy == "fallback" and len(chat.requests) == 3


def test_smollm2s_empty_reply_to_a_turn_completes_it_with_no_text(chat: ChatServer, tmp_path: Path) -> None:
    """The same empty stream as a turn's reply: the turn completes with empty text after one
    request; nothing hangs and nothing is asked again."""
    chat.plan(recorded("reply_empty"))
    result = _one_turn(chat, tmp_path, "Hi")
    assert result.status == "completed" and result.text == "" and result.requests == 1, result


def test_smollm2_offered_a_tool_writes_code_instead_and_the_turn_completes(
    chat: ChatServer, tmp_path: Path
) -> None:
    """It never called `read`: it wrote a Python snippet that would read the file, until its cap.
    The turn completes with that text and runs no tool."""
    chat.plan(recorded("turn_with_tools"))
    result = _one_turn(chat, tmp_path, "Read src/cart.py and tell me what it does.")
    assert result.status == "completed", result
    assert result.text.startswith("Here's a sample of a Python script") and result.requests == 1


def test_a_tool_call_with_arguments_not_json_or_an_unknown_name_gives_the_model_a_tool_error(
    chat: ChatServer, tmp_path: Path
) -> None:
    """What SmolLM2 never did (so not recorded from it): one reply with a call whose arguments stop
    mid-JSON, as a `length` finish leaves them, and a call of a tool the host has not got. Each
    becomes a tool result with status `error` that says why, the next request carries both to the
    model, and the turn goes on to the model's answer."""
    calls = [
        call_start(0, "c1", "read", '{"path": "src/ca'),
        call_start(1, "c2", "read_file", '{"path": "a"}'),
    ]
    chat.plan(Sse((chunk(role="assistant", tool_calls=calls), chunk(finish="tool_calls"))))
    chat.plan(text_reply("Sorry, those calls were malformed."))
    result = _one_turn(chat, tmp_path, "Read src/cart.py.", expect_tools=2)
    assert result.status == "completed" and result.requests == 2, result
    assert result.text == "Sorry, those calls were malformed."
    sent = {m["tool_call_id"]: m["content"] for m in chat.requests[1].body["messages"] if m["role"] == "tool"}
    assert sent["c1"].startswith("read: arguments are not JSON: ")
    assert sent["c2"] == "unknown tool 'read_file'"


def _one_turn(chat: ChatServer, tmp_path: Path, message: str, expect_tools: int = 0) -> TurnResult:
    """One turn of a fresh host on the chat server, the host closed and its actors gone after."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    before = set(threading.enumerate())
    provider = OpenAIProvider(OpenAIConfig(base_url=chat.url, model="smollm2"))
    settings = SessionSettings(model="smollm2", context_window=4096, max_output_tokens=120)
    host = Host.open(tmp_path / "store", provider=provider, tools=WorkspaceTools(), settings=settings)
    try:
        result = host.send("s", message, workspace=workspace).result(60)
        ran = [r.event for r in host.journal.read("s") if isinstance(r.event, ToolResult)]
        assert len(ran) == expect_tools and all(e.status == "error" for e in ran), ran
    finally:
        host.close()
        provider.close()
    for thread in threading.enumerate():
        if thread not in before and "Actor-" in thread.name:
            thread.join(30)
    return result
