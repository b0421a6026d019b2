"""The bulk read paths give exactly what the line-by-line paths give: states, pieces, errors, reports.

Replay reads a session in runs (index values only, one pread and one
msgspec call a run, `decode_session_run`); `scan_log` reads a segment a
chunk of lines at a time; `verify` reads the log once. Each falls back to
the exact line-by-line path at any doubt, so a store holding every kind,
checkpoints, sessions interleaved over several segments, and each kind of
damage, reads the same either way.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import crc32c
import msgspec
import pytest

from cairn.events.kinds import EventBase
from cairn.events.model import BlobPart
from cairn.events.state import Replayer, replay
from cairn.store import Journal, session_reader, verify_store
from cairn.store import reader as reader_module
from cairn.store import verify as verify_module
from cairn.store.blobs import BlobStore
from cairn.store.errors import CorruptionError
from cairn.store.reader import LogLine, classify, scan_log
from cairn.store.segments import iter_lines, list_segments, segment_name
from cairn.store.session_reader import MAX_SEQ
from tests.fixtures.make_golden import golden_events
from tests.store.helpers import checkpoint, msg, started, usage

CLOCK = 1_700_000_000_000
SIDS = ("a", "b", "c")


BLOB = b"a line of a long tool output\n" * 40
BLOB_PART = BlobPart(
    sha256=hashlib.sha256(BLOB).hexdigest(), size=len(BLOB), chars=len(BLOB), preview=BLOB[:20].decode()
)


def _real_blobs(event: EventBase) -> EventBase:
    """The event with its blob parts naming BLOB (the golden log's name no stored blob)."""
    content = getattr(event, "content", None)
    if not isinstance(content, tuple) or not any(isinstance(part, BlobPart) for part in content):
        return event
    parts = tuple(BLOB_PART if isinstance(part, BlobPart) else part for part in content)
    return msgspec.structs.replace(event, content=parts)  # type: ignore[type-var]


def _events(n: int) -> list[EventBase]:
    """n events of every kind the golden log has, then messages, usages and a checkpoint in turn."""
    golden = [_real_blobs(event) for event in golden_events()]
    out: list[EventBase] = []
    for i in range(n):
        if i < len(golden):
            out.append(golden[i])
        elif i % 7 == 0:
            out.append(checkpoint(i, i))
        elif i % 3 == 0:
            out.append(usage(i))
        else:
            out.append(msg(i, f"message {i} " + "x" * (i % 50)))
    return out


def _store(root: Path) -> Path:
    """Three sessions of 60 events each, interleaved in calls of 1-4 events, over segments of 3,000 bytes."""
    events = _events(60)
    with Journal.open(root, segment_bytes=3_000, clock_ms=lambda: CLOCK) as journal:
        BlobStore(root).put(BLOB)
        seqs = dict.fromkeys(SIDS, 0)
        for sid in SIDS:
            journal.append(sid, [started()], expected_seq=0)
            seqs[sid] = 1
        step = 0
        while any(seq < 60 for seq in seqs.values()):
            for n, sid in enumerate(SIDS):
                take = min(1 + (step + n) % 4, 60 - seqs[sid])
                if take:
                    journal.append(sid, events[seqs[sid] : seqs[sid] + take], expected_seq=seqs[sid])
                    seqs[sid] += take
            step += 1
    return root


def _line_by_line(log: Path) -> list[LogLine]:
    """Every piece of the log as `classify` says it is, one piece at a time (the reference)."""
    return [
        classify(s, off, raw) for s in list_segments(log) for off, raw in iter_lines(log / segment_name(s))
    ]


def _exact_state(journal: Journal, sid: str) -> object:
    replayer = Replayer()
    for page in journal._reader._exact_pages(sid, 1, MAX_SEQ):
        replayer.feed(page)
    return replayer.state()


@pytest.mark.parametrize("run_bytes", [128 << 10, 1_500])
def test_replay_in_runs_equals_the_line_by_line_paths(
    tmp_path: Path, run_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(session_reader, "_RUN_BYTES", run_bytes)
    root = _store(tmp_path / "store")
    with Journal.open(root, segment_bytes=40_000) as journal:  # "d", written alone: long runs
        journal.append("d", [started(), *_events(300)], expected_seq=0)
        assert journal.replay_full("d") == replay(journal.read("d")) == journal.load("d")
        assert journal.replay_full("d").last_seq == 301
        assert len(list_segments(root / "log")) > 10
        for sid in SIDS:
            full = journal.replay_full(sid)
            assert full.last_seq == 60
            assert full == replay(journal.read(sid))  # every line, its chain included, one by one
            assert full == _exact_state(journal, sid)
            assert journal.load(sid) == full
            assert full.epoch > 1
            pages = list(journal._reader.replay_pages(sid, 1))
            assert [r for page in pages for r in page] == list(journal.read(sid))
            assert [r.seq for page in pages for r in page] == list(range(1, 61))


def _rewrite(path: Path, line_no: int, change: bytes, into: bytes, *, crc: bool) -> None:
    """Replace `change` by `into` (same length, every time) in line `line_no` of a segment, the crc
    recomputed if asked."""
    lines = path.read_bytes().split(b"\n")
    line = lines[line_no]
    assert change in line and len(change) == len(into)
    line = line.replace(change, into)
    if crc:
        prefix = line[: len(line) - len(b',"crc":"00000000"}')]
        line = prefix + b',"crc":"%08x"}' % crc32c.crc32c(prefix)
    lines[line_no] = line
    path.write_bytes(b"\n".join(lines))


DAMAGE = {
    "bad crc": (b"message", b"massage", False),
    "unknown kind": (b'"kind":"user-message"', b'"kind":"user-massage"', True),
    "envelope kind not the body's": (
        b'"kind":"user-message","event"',
        b'"kind":"tool-result" ,"event"',
        True,
    ),
    "wrong envelope": (b'"v":1,', b'"v":2,', True),
    "seq the index does not expect": (b'"seq":', b'"seX":', True),
}


def _damaged_line(root: Path, sid: str) -> tuple[Path, int]:
    """A segment and the number of a user-message line of `sid` in its middle."""
    for path in sorted((root / "log").glob("*.jsonl")):
        lines = path.read_bytes().split(b"\n")
        for no, line in enumerate(lines[1:-2], start=1):
            if f'"sid":"{sid}"'.encode() in line and b'"kind":"user-message"' in line:
                return path, no
    raise AssertionError("no user message")


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damage_the_index_does_not_know_raises_what_the_exact_path_raises(
    tmp_path: Path, damage: str
) -> None:
    root = _store(tmp_path / "store")
    path, line_no = _damaged_line(root, "b")
    change, into, crc = DAMAGE[damage]
    _rewrite(path, line_no, change, into, crc=crc)
    with Journal.open(root) as journal:  # the index's point is past the damage: it is not scanned
        with pytest.raises(CorruptionError) as fast:
            journal.replay_full("b")
        with pytest.raises(CorruptionError) as exact:
            _exact_state(journal, "b")
        assert str(fast.value) == str(exact.value)
        assert (fast.value.segment, fast.value.offset, fast.value.sid) == (path.name, exact.value.offset, "b")
        assert journal.replay_full("a") == replay(journal.read("a"))  # other sessions read on


def test_a_line_that_lost_its_newline_raises_what_the_exact_path_raises(tmp_path: Path) -> None:
    root = _store(tmp_path / "store")
    path, line_no = _damaged_line(root, "c")
    data = bytearray(path.read_bytes())
    data[sum(len(line) + 1 for line in bytes(data).split(b"\n")[: line_no + 1]) - 1] = 0x20  # its \n
    path.write_bytes(bytes(data))
    with Journal.open(root, readonly=True) as journal:
        with pytest.raises(CorruptionError) as fast:
            journal.replay_full("c")
        with pytest.raises(CorruptionError) as exact:
            _exact_state(journal, "c")
        assert str(fast.value) == str(exact.value)


def _damage_everything(root: Path) -> None:
    """Each kind of damage in its own segment, and a torn tail at the end of the log."""
    segments = sorted((root / "log").glob("*.jsonl"))
    free = iter(segments[1:])
    for change, into, crc in DAMAGE.values():
        for path in free:
            lines = path.read_bytes().split(b"\n")
            if len(lines) > 3 and change in lines[1]:
                _rewrite(path, 1, change, into, crc=crc)
                break
        else:
            raise AssertionError(f"no line to damage with {change!r}")
    spare = segments[-3]
    data = spare.read_bytes()
    cut = data.index(b"\n") + 1
    spare.write_bytes(data[:cut] + b"\n" + b"  " + data[cut:])  # a blank piece, a line led by spaces
    truncated = segments[-2]
    data = truncated.read_bytes()
    first_end = data.index(b"\n") + 1
    truncated.write_bytes(data[: first_end - 40] + b"\n" + data[first_end:])  # a line cut short
    last = segments[-1]
    last.write_bytes(last.read_bytes() + b'{"v":1,"pos":99999,"sid":"a","se')  # torn tail


@pytest.mark.parametrize("chunk", [4 << 20, 700])
def test_scan_log_gives_what_classify_gives_piece_by_piece(
    tmp_path: Path, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reader_module, "_CHUNK_BYTES", chunk)
    root = _store(tmp_path / "store")
    log = root / "log"
    sound = list(scan_log(log))
    assert sound == _line_by_line(log) and all(piece.record is not None for piece in sound)
    _damage_everything(root)
    pieces = list(scan_log(log))
    assert pieces == _line_by_line(log)
    errors = " | ".join(piece.error for piece in pieces if piece.error)
    for error in (
        "checksum mismatch",
        "unknown event kind 'user-massage'",
        "envelope kind 'tool-result' differs from body kind 'user-message'",
        "unsupported schema version",
        "bad envelope",
        "not a framed log line (no trailing crc field)",
        "no newline at the end (torn line)",
    ):
        assert error in errors
    assert pieces[-1].error == "no newline at the end (torn line)"
    segments = list_segments(log)
    assert list(scan_log(log, start_segment=segments[3], start_offset=0, stop=(segments[5], 200))) == [
        classify(s, off, raw)
        for s in segments[3:6]
        for off, raw in iter_lines(log / segment_name(s), 0, 200 if s == segments[5] else None)
    ]


class _SeparateRebuild(verify_module.Rebuild):
    """The index to compare with rebuilt by its own scan of the log, as verify did before one pass."""

    def _before(self, lines, take):  # type: ignore[no-untyped-def]
        self.usable = False
        for line in lines:
            take(line)
        return
        yield


def test_verify_in_one_pass_reports_what_two_passes_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _store(tmp_path / "store")
    clean = verify_store(root)
    assert clean.ok and clean.index_checked
    _damage_everything(root)
    with Journal.open(root, readonly=True):
        pass
    one = verify_store(root)
    monkeypatch.setattr(verify_module, "Rebuild", _SeparateRebuild)
    two = verify_store(root)
    assert not one.ok
    assert (one.problems, one.warnings, one.info) == (two.problems, two.warnings, two.info)
    assert (one.lines, one.bytes, one.sessions) == (two.lines, two.bytes, two.sessions)
    assert verify_store(_store(tmp_path / "again")).problems == []


def _capital_crc(line: bytes) -> bytes:
    """The line with its crc field's hex digits in capitals: the same value, not the field the writer
    writes (`crc_fields_match` compares bytes; int() would take it)."""
    return line[:-10] + line[-10:-2].upper() + line[-2:]


#: damage to one line, and whether the line itself is unsound (a seq gap is a sound line, out of place)
LONG_RUN_DAMAGE = {
    "bad crc": (lambda line: line.replace(b"message", b"massage"), True),
    "crc field in capitals": (_capital_crc, True),
    "malformed body, crc recomputed": (
        lambda line: _recrc(line.replace(b'"type":"text"', b'"type":"texx"')),
        True,
    ),
    "seq gap, crc recomputed": (lambda line: _recrc(line.replace(b'"seq":150,', b'"seq":151,')), False),
}


def _recrc(line: bytes) -> bytes:
    prefix = line[: len(line) - len(b',"crc":"00000000"}')]
    return prefix + b',"crc":"%08x"}' % crc32c.crc32c(prefix)


@pytest.mark.parametrize("damage", sorted(LONG_RUN_DAMAGE))
def test_damage_in_a_long_run_of_one_session_is_refused_by_replay_scan_and_verify(
    tmp_path: Path, damage: str
) -> None:
    root = tmp_path / "store"
    with Journal.open(root, clock_ms=lambda: CLOCK) as journal:  # one segment, one session: one long run
        events = [started(), *(msg(i, f"message {i} " + "x" * (i % 50)) for i in range(299))]
        journal.append("d", events, expected_seq=0)
        sound = journal.replay_full("d")
    assert sound.last_seq == 300
    (path,) = sorted((root / "log").glob("*.jsonl"))
    lines = path.read_bytes().split(b"\n")
    line_no = next(n for n, line in enumerate(lines) if b'"seq":150,' in line)
    damage_line, unsound = LONG_RUN_DAMAGE[damage]
    damaged = damage_line(lines[line_no])
    if damaged == lines[line_no]:  # a crc of digits only has no capitals: take the next line's field
        line_no += 1
        damaged = _capital_crc(lines[line_no])
    assert damaged != lines[line_no] and b"\n" not in damaged
    lines[line_no] = damaged
    path.write_bytes(b"\n".join(lines))
    with Journal.open(root, readonly=True) as journal:
        with pytest.raises(CorruptionError) as fast:
            journal.replay_full("d")
        with pytest.raises(CorruptionError) as exact:
            _exact_state(journal, "d")
        assert str(fast.value) == str(exact.value)
        assert fast.value.seq in (150, 151)
        with pytest.raises(CorruptionError):
            journal.load("d")
    pieces = list(scan_log(root / "log"))
    assert pieces == _line_by_line(root / "log")
    at = sum(len(line) + 1 for line in lines[:line_no])
    assert [piece.offset for piece in pieces if piece.error] == ([at] if unsound else [])
    assert not verify_store(root).ok
