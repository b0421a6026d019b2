"""Tool-result budget (X1-X3): what the model sees of tool output.

The spec's numbers are stated literally (X1 100,000 and 2,000 chars, X2
200,000 chars per turn), never taken from the module, so a wrong constant fails.
"""

from __future__ import annotations

from cairn.actors.session.request import assemble
from cairn.actors.session.tool_budget import render_context, render_result, render_turn
from cairn.events.model import BlobPart, ImagePart, Message, MessageMeta, TextPart, ToolCall
from cairn.events.state import replay
from tests.session.builders import Session, new_view

SHA = "9f" * 32


def _result(text: str, call_id: str = "c1", seq: int = 7) -> Message:
    return Message(role="tool", content=(TextPart(text),), tool_call_id=call_id, meta=MessageMeta(seq=seq))


def _text(message: Message) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(part.text for part in content if isinstance(part, TextPart))


def test_X1_a_result_over_the_limit_shows_a_preview_and_where_the_output_is() -> None:
    body = "".join(f"line {i}\n" for i in range(30_000))
    assert len(body) > 100_000
    rendered, shown = render_result(_result(body))
    parts = rendered.content
    assert isinstance(parts, tuple)
    assert parts[0] == TextPart(body[:2_000])
    assert shown == 2_000
    note = parts[-1].text  # type: ignore[union-attr]
    assert f"{len(body):,} chars" in note
    assert "tool-result event seq 7" in note


def test_X1_a_result_at_the_limit_is_shown_whole_and_unchanged() -> None:
    message = _result("x" * 100_000)
    rendered, shown = render_result(message)
    assert rendered is message
    assert shown == 100_000
    plain = Message(role="tool", content="y" * (100_000 + 1), tool_call_id="c1")
    cut, _ = render_result(plain)
    assert isinstance(cut.content, str) and cut.content.startswith("y" * 2_000 + "\n\n[")


def test_X1_a_blob_shows_its_preview_and_names_the_blob() -> None:
    blob = BlobPart(SHA, 300_000, "text/plain", chars=250_000, preview="p" * 4_000)
    rendered, shown = render_result(Message(role="tool", content=(blob,), tool_call_id="c1"))
    assert shown == 2_000
    assert rendered.content[0] == TextPart("p" * 2_000)  # type: ignore[index]
    note = rendered.content[-1].text  # type: ignore[index,union-attr]
    assert f"blob sha256:{SHA}" in note and "250,000 chars" in note
    assert not any(isinstance(p, BlobPart) for p in rendered.content)  # type: ignore[union-attr]
    # a small blob whose preview is all of it shows whole, without a note
    whole = BlobPart(SHA, 10, "text/plain", chars=10, preview="0123456789")
    shown_whole, _ = render_result(Message(role="tool", content=(whole,), tool_call_id="c1"))
    assert shown_whole.content == (TextPart("0123456789"),)
    # under the limit but only a preview stored inline: the preview, and the note says where the rest is
    partial = BlobPart(SHA, 60_000, "text/plain", chars=60_000, preview="q" * 2_000)
    rendered_partial, _ = render_result(Message(role="tool", content=(partial,), tool_call_id="c1"))
    assert f"blob sha256:{SHA}" in _text(rendered_partial)
    # images pass through; binary blobs become a note
    image = BlobPart(SHA, 5_000, "image/png")
    binary = BlobPart(SHA, 5_000, "application/pdf")
    mixed = Message(role="tool", content=(ImagePart(data="AA"), image, binary), tool_call_id="c")
    out, _ = render_result(mixed)
    assert out.content[:2] == (ImagePart(data="AA"), image)  # type: ignore[index]
    assert f"blob sha256:{SHA}" in out.content[2].text  # type: ignore[index,union-attr]


def test_X2_a_turn_shares_two_hundred_thousand_chars_but_keeps_the_preview() -> None:
    results = [_result("a" * 90_000, "c1"), _result("b" * 90_000, "c2"), _result("c" * 90_000, "c3")]
    results.append(_result("d" * 50_000, "c4"))
    first, second, third, fourth = render_turn(results)
    assert first is results[0] and second is results[1]
    assert third.content[0] == TextPart("c" * (200_000 - 180_000))  # type: ignore[index]
    assert "90,000 chars" in _text(third)
    assert fourth.content[0] == TextPart("d" * 2_000)  # type: ignore[index]
    assert "budget" in _text(fourth)


def test_X2_the_budget_is_per_assistant_turn() -> None:
    call1 = Message(role="assistant", tool_calls=(ToolCall("c1", "read"), ToolCall("c2", "read")))
    call2 = Message(role="assistant", tool_calls=(ToolCall("c3", "read"),))
    context = [call1, _result("a" * 100_000, "c1"), _result("b" * 100_000, "c2")]
    context += [call2, _result("c" * 100_000, "c3")]
    rendered = render_context(context)
    assert rendered == tuple(context)  # 200,000 for the first turn, a fresh budget for the second
    over = [call1, _result("a" * 100_000, "c1"), _result("b" * 100_001, "c2")]
    assert render_context(over)[2].content[0] == TextPart("b" * 2_000)  # type: ignore[index]


def test_X3_live_and_replayed_sessions_send_identical_requests() -> None:
    session = Session()
    session.user("fix the bug")
    blob = BlobPart(SHA, 400_000, "text/plain", chars=350_000, preview="log line\n" * 300)
    session.tool_turn(output=(blob,))
    session.tool_turn(output="z" * 150_000, calls=2)
    session.tool_turn(output="small")
    live = assemble(session.state, new_view())
    replayed = assemble(replay(session.records), new_view())
    assert live.messages == replayed.messages
    assert live.projection == replayed.projection
    assert any(f"blob sha256:{SHA}" in _text(m) for m in live.messages)
    # the full output stays in the state the log folds to
    assert session.state.context[2].content == (blob,)
