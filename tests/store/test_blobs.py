"""Large parts go to content-addressed blobs, fsynced first; verify catches missing or altered blobs."""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

import pytest

from cairn.events.kinds import ToolResult, UserMessage
from cairn.events.model import BlobPart, ImagePart, TextPart
from cairn.store import Journal, verify_store
from cairn.store.blobs import BLOB_THRESHOLD, PREVIEW_CHARS
from cairn.store.errors import BlobError
from tests.store.helpers import started


def _big_tool_output(chars: int = BLOB_THRESHOLD + 1000) -> ToolResult:
    text = "".join(f"line {i}: ok\n" for i in range(chars // 12 + 1))[:chars]
    return ToolResult(
        call_id="c1",
        tool_name="bash",
        status="ok",
        effect="read",
        content=(TextPart("head"), TextPart(text)),
        original_chars=chars,
    )


def test_large_tool_output_goes_to_a_blob(tmp_path: Path) -> None:
    calls: list[int] = []

    def counting_fsync(fd: int) -> None:
        calls.append(fd)
        os.fsync(fd)

    event = _big_tool_output()
    big_text = event.content[1].text  # type: ignore[union-attr]
    with Journal.open(tmp_path / "store", fsync=counting_fsync) as journal:
        journal.append("s", [started()], expected_seq=0)
        before = len(calls)
        [record] = journal.append("s", [event], expected_seq=1)
        assert len(calls) - before >= 3  # blob file, its directory (and parent), then the log
        small, part = record.event.content  # type: ignore[union-attr]
        assert small == TextPart("head")
        assert isinstance(part, BlobPart)
        data = big_text.encode()
        assert part.sha256 == hashlib.sha256(data).hexdigest()
        assert (part.size, part.chars, part.media_type) == (len(data), len(big_text), "text/plain")
        assert part.preview == big_text[:PREVIEW_CHARS]
        assert list(journal.read("s", 2)) == [record]
        assert journal.read_blob(part.sha256) == data
        assert (tmp_path / "store" / "blobs" / part.sha256[:2] / part.sha256[2:]).is_file()
        line_sizes = [p.stat().st_size for p in (tmp_path / "store" / "log").iterdir()]
        assert sum(line_sizes) < 10_000
    assert verify_store(tmp_path / "store").ok


def test_small_parts_stay_inline_and_large_images_become_blobs(tmp_path: Path) -> None:
    image_bytes = bytes(range(256)) * (BLOB_THRESHOLD // 256 + 10)
    image = ImagePart(media_type="image/png", data=base64.b64encode(image_bytes).decode())
    event = UserMessage(message_id="m", content=(TextPart("look"), image))
    with Journal.open(tmp_path / "store") as journal:
        [record] = journal.append("s", [event], expected_seq=0)
        text, part = record.event.content  # type: ignore[union-attr]
        assert text == TextPart("look")
        assert isinstance(part, BlobPart)
        assert (part.media_type, part.size) == ("image/png", len(image_bytes))
        assert (part.chars, part.preview) == (0, "")
        assert journal.read_blob(part.sha256) == image_bytes
        small = UserMessage(message_id="n", content=(TextPart("x" * 1000),))
        [kept] = journal.append("s", [small], expected_seq=1)
        assert kept.event == small


def test_verify_catches_a_missing_or_altered_blob(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with Journal.open(root) as journal:
        journal.append("s", [started()], expected_seq=0)
        [record] = journal.append("s", [_big_tool_output()], expected_seq=1)
        part = record.event.content[1]  # type: ignore[union-attr]
        assert isinstance(part, BlobPart)
    blob = root / "blobs" / part.sha256[:2] / part.sha256[2:]
    original = blob.read_bytes()
    blob.write_bytes(original[:-1] + b"!")
    report = verify_store(root)
    assert [(p.code, p.sid, p.seq) for p in report.problems] == [("blob", "s", 2)]
    assert "altered" in report.problems[0].message
    with Journal.open(root, readonly=True) as reader, pytest.raises(BlobError):
        reader.read_blob(part.sha256)
    blob.unlink()
    report = verify_store(root)
    assert [p.code for p in report.problems] == ["blob"] and "missing" in report.problems[0].message
    with Journal.open(root, readonly=True) as reader, pytest.raises(BlobError):
        reader.read_blob(part.sha256)
    with Journal.open(root, readonly=True) as reader, pytest.raises(BlobError):
        reader.read_blob("../../etc/passwd")


def test_a_blob_name_is_64_lowercase_hex_digits_matched_whole(tmp_path: Path) -> None:
    with Journal.open(tmp_path) as journal:
        for bad in ("a" * 64 + "\n", "A" * 64, "a" * 63, "a" * 65, "../" + "a" * 61):
            with pytest.raises(BlobError, match="not a SHA-256 hex digest"):
                journal.read_blob(bad)
