"""User messages with images: accepted by the host, kept in the log, sent to the model as images."""

from __future__ import annotations

import base64
import random
from pathlib import Path

import pytest

from cairn.actors.provider.scripted import Reply
from cairn.cli import main as cairn
from cairn.events.errors import InputError
from cairn.events.kinds import UserMessage
from cairn.events.model import BlobPart, ImagePart, TextPart
from tests.actors.helpers import WAIT, open_host, reopen_and_compare, scripted


def _png(size: int) -> str:
    raw = random.Random(size).randbytes(size)
    return base64.b64encode(raw).decode()


def test_a_large_image_is_kept_as_a_blob_and_still_sent_as_an_image(tmp_path: Path, capsys) -> None:
    provider = scripted(Reply(text="I see a chart."), Reply(text="Still the chart."))
    host = open_host(tmp_path / "store", provider)
    data = _png(300_000)  # 400,000 base64 chars: over the 256 KiB blob threshold
    result = host.send(
        "s", [TextPart("what is in this screenshot?"), ImagePart("image/png", data)], workspace=str(tmp_path)
    ).result(WAIT)
    assert result.ok, result

    [user] = [r.event for r in host.journal.read("s") if isinstance(r.event, UserMessage)]
    blob = user.content[1]
    assert isinstance(blob, BlobPart) and blob.media_type == "image/png"  # the line stays small
    assert host.journal.read_blob(blob.sha256) == base64.b64decode(data)

    sent = [m for m in provider.requests[0].messages if m.role == "user"][-1]
    assert sent.content == (TextPart("what is in this screenshot?"), ImagePart("image/png", data))

    # what an auditor is shown names the blob instead of carrying 400 KB of base64
    assert cairn(["context", "s", "--store", str(tmp_path / "store"), "--json"]) == 0
    assert data[:1000] not in capsys.readouterr().out

    assert host.send("s", "and now?").result(WAIT).ok  # the next request carries it again
    again = next(m for m in provider.requests[-1].messages if m.role == "user")
    assert again.content[1] == ImagePart("image/png", data)
    reopen_and_compare(host, tmp_path / "store", ["s"]).close()


def test_a_small_image_stays_inline(tmp_path: Path) -> None:
    provider = scripted(Reply(text="A dot."))
    host = open_host(tmp_path / "store", provider)
    image = ImagePart("image/png", _png(300))
    assert host.send("s", [image], workspace=str(tmp_path)).result(WAIT).ok
    [user] = [r.event for r in host.journal.read("s") if isinstance(r.event, UserMessage)]
    assert user.content == (image,)
    assert [m for m in provider.requests[0].messages if m.role == "user"][-1].content == (image,)
    host.close()


@pytest.mark.parametrize(
    "message",
    [
        [],
        "",
        [ImagePart("image/png")],
        [ImagePart("text/plain", "aGk=")],
        [BlobPart(sha256="ab", size=1)],
        42,
    ],
)
def test_bad_messages_are_refused_before_anything_is_written(tmp_path: Path, message: object) -> None:
    host = open_host(tmp_path / "store", scripted())
    with pytest.raises(InputError):
        host.send("s", message, workspace=str(tmp_path))  # type: ignore[arg-type]
    assert host.journal.last_seq("s") == 0
    host.close()
