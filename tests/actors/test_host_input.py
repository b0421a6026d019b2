"""`Host.send` checks what a host passes it: an InputError saying what was expected, nothing written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cairn.actors.session.settings import SessionSettings
from cairn.events.errors import InputError
from cairn.events.model import ImagePart, TextPart
from tests.actors.helpers import WAIT, open_host, scripted


class _PathOfBytes:
    def __fspath__(self) -> bytes:
        return b"/tmp"


BAD_SENDS: list[tuple[str, dict[str, Any], str]] = [
    ("message-dict", {"text": {"role": "user", "content": "hi"}}, "not a dict: pass the text itself"),
    ("message-bytes", {"text": b"hi"}, "not bytes: decode it first"),
    ("message-int", {"text": 12}, "not int"),
    ("message-none", {"text": None}, "not NoneType"),
    ("message-empty", {"text": ""}, "needs some text"),
    ("message-surrogate", {"text": "hi \ud800"}, "lone surrogate at index 3"),
    ("parts-of-str", {"text": ["hi"]}, "part 0 is a str"),
    ("text-part-int", {"text": [TextPart(5)]}, "`$[0].text`"),  # type: ignore[arg-type]
    ("image-data-int", {"text": [ImagePart("image/png", 7)]}, "`$[0].data`"),  # type: ignore[arg-type]
    ("image-not-base64", {"text": [ImagePart("image/png", "not base64!!")]}, "data is not base64"),
    ("part-surrogate", {"text": [TextPart("\udfff")]}, "lone surrogate"),
    ("workspace-int", {"workspace": 12}, "a path (str or os.PathLike), not int"),
    ("workspace-bytes", {"workspace": b"/tmp"}, "a str path, not bytes"),
    ("workspace-pathlike-bytes", {"workspace": _PathOfBytes()}, "a str path, not bytes"),
    ("workspace-nul", {"workspace": "/tmp/a\x00b"}, "without NUL"),
    ("workspace-surrogate", {"workspace": "/tmp/\udcff"}, "lone surrogate"),
    ("settings-dict", {"settings": {"model": "m"}}, "a SessionSettings, not dict"),
    ("settings-field", {"settings": SessionSettings(model=5)}, "`$.model`"),  # type: ignore[arg-type]
    ("session-int", {"session": 7}, "invalid session id"),
]


@pytest.mark.parametrize(
    "override, says", [(o, s) for _, o, s in BAD_SENDS], ids=[i for i, _, _ in BAD_SENDS]
)
def test_a_bad_send_is_an_input_error_before_anything_is_written(
    tmp_path: Path, override: dict[str, Any], says: str
) -> None:
    with open_host(tmp_path / "store", scripted()) as host:
        assert host.send("s1", "first", workspace=str(tmp_path)).result(timeout=WAIT).status == "completed"
        before = host.journal.last_seq("s1")
        arguments: dict[str, Any] = {"session": "s2", "text": "hello", "workspace": str(tmp_path)}
        arguments.update(override)
        with pytest.raises(InputError) as caught:
            host.send(arguments.pop("session"), arguments.pop("text"), **arguments)
        assert says in str(caught.value)
        assert host.journal.last_seq("s1") == before
        assert host.journal.last_seq("s2") == 0
        assert host.send("s1", "still fine").result(timeout=WAIT).status == "completed"


def test_a_message_the_log_would_move_to_a_blob_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    """Text over the blob threshold (256 KiB encoded) would be stored as a blob of which the model sees a
    2,000-char preview: a user's message is refused instead (`MessageTooLarge`); one just under it
    reaches the model whole."""
    from cairn.actors.errors import MessageTooLarge
    from cairn.events.model import text_of
    from cairn.store.blobs import BLOB_THRESHOLD

    provider = scripted()
    fits = "x" * (BLOB_THRESHOLD - 64)  # the part's JSON adds {"type":"text","text":""}
    settings = SessionSettings(model="m", context_window=200_000)
    with open_host(tmp_path / "store", provider, settings=settings) as host:
        assert host.send("s1", "first", workspace=str(tmp_path)).result(timeout=WAIT).status == "completed"
        before = host.journal.last_seq("s1")
        for message, says in [
            ("word " * 200_000, "the message encodes to 1,000,025 bytes, over the 262,144"),
            ([TextPart("see:"), TextPart("é" * 140_000)], "text part 1 encodes to 280,025 bytes"),
        ]:
            with pytest.raises(MessageTooLarge) as caught:
                host.send("s1", message)
            assert says in str(caught.value)
            assert "put it in a file of the workspace" in str(caught.value)
            assert host.journal.last_seq("s1") == before
        assert host.send("s1", fits).result(timeout=WAIT).status == "completed"
    sent = [text_of(m.content) for m in provider.requests[-1].messages if m.role == "user"]
    assert fits in sent


@pytest.mark.parametrize("bad", ["abc", float("nan"), float("inf"), -1, True], ids=repr)
def test_a_bad_timeout_is_an_input_error_not_a_type_error_or_no_bound(tmp_path: Path, bad: object) -> None:
    """`result` and `events` take None or a finite number of seconds >= 0: a str failed mid-wait
    with a bare TypeError, and NaN waited without bound."""
    with open_host(tmp_path / "store", scripted()) as host:
        turn = host.send("s1", "first", workspace=str(tmp_path))
        with pytest.raises(InputError, match="timeout must be"):
            turn.result(timeout=bad)  # type: ignore[arg-type]
        with pytest.raises(InputError, match="timeout must be"):
            next(iter(turn.events(timeout=bad)))  # type: ignore[arg-type]
        assert turn.result(timeout=WAIT).status == "completed"
        assert turn.result(timeout=0).status == "completed"  # done: no wait needed
