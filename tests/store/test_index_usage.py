"""The index's usage figures per session: cumulative sums, counts of reports, the last total.

A response whose provider sent no usage leaves no usage event; the summary
must let a listing tell "unknown" from 0. The figures are derived data: a
rebuild equals live indexing, and an index of the format before them is
rebuilt, never read as zeros.
"""

from __future__ import annotations

import json
from pathlib import Path

import lmdb
import msgspec
import pytest

from cairn import cli
from cairn.events.kinds import AssistantMessage, Usage
from cairn.store import Journal, index_dump, reindex
from cairn.store.verify import verify_store
from tests.store.helpers import started


def _response(n: int, usage: Usage | None) -> list:  # type: ignore[type-arg]
    events = [AssistantMessage(message_id=f"a{n}", request_id=f"r{n}", text=f"answer {n}")]
    return events + ([usage] if usage is not None else [])


def _store(root: Path) -> None:
    with Journal.open(root) as journal:
        journal.append("all", [started()], expected_seq=0)
        for n in range(3):
            journal.append(
                "all",
                _response(
                    n,
                    Usage(
                        request_id=f"r{n}",
                        prompt_tokens=1000 + n,
                        completion_tokens=10,
                        total_tokens=1010 + n,
                    ),
                ),
                expected_seq=journal.last_seq("all"),
            )
        journal.append("none", [started()], expected_seq=0)
        for n in range(2):  # a server that sends no usage chunk: no usage event at all
            journal.append("none", _response(n, None), expected_seq=journal.last_seq("none"))
        journal.append("some", [started()], expected_seq=0)
        journal.append(
            "some",
            _response(0, Usage(request_id="r0", prompt_tokens=500, completion_tokens=7, total_tokens=507)),
            expected_seq=1,
        )
        journal.append("some", _response(1, None), expected_seq=journal.last_seq("some"))
        journal.append(
            "some",
            _response(2, Usage(request_id="r2", total_tokens=40)),  # a total only
            expected_seq=journal.last_seq("some"),
        )


def test_summaries_sum_the_reported_usage_and_count_the_reports(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _store(root)
    with Journal.open(root, readonly=True) as journal:
        every = {s.sid: s for s in journal.sessions()}
    full, none, some = every["all"], every["none"], every["some"]
    assert (full.prompt_tokens, full.completion_tokens) == (3003, 30)
    assert (full.prompt_reports, full.completion_reports, full.last_usage_total_tokens) == (3, 3, 1012)
    assert (none.prompt_reports, none.completion_reports, none.last_usage_total_tokens) == (0, 0, None)
    assert (some.prompt_tokens, some.completion_tokens) == (500, 7)
    assert (some.prompt_reports, some.completion_reports, some.last_usage_total_tokens) == (1, 1, 40)
    live = index_dump(root)
    reindex(root)
    assert index_dump(root) == live


def test_sessions_json_says_unknown_not_0_and_names_the_last_requests_total(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "store"
    _store(root)
    assert cli.main(["sessions", "--store", str(root), "--json"]) == 0
    listed = {s["sid"]: s for s in json.loads(capsys.readouterr().out)}
    assert listed["all"]["prompt_tokens"] == 3003 and listed["all"]["completion_tokens"] == 30
    assert listed["all"]["usage_complete"] is True and listed["all"]["last_usage_total_tokens"] == 1012
    assert listed["none"]["prompt_tokens"] is None and listed["none"]["completion_tokens"] is None
    assert listed["none"]["usage_complete"] is False and listed["none"]["responses_without_usage"] == 2
    assert listed["some"]["prompt_tokens"] == 500 and listed["some"]["responses_without_usage"] == 2
    assert "usage_tokens" not in listed["all"]  # the old, ambiguous name
    assert cli.main(["sessions", "--store", str(root)]) == 0
    table = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:] if line}
    assert " 3,003 " in table["all"] and table["none"].count("unknown") == 2
    assert "≥500" in table["some"]


def _downgrade(root: Path) -> None:
    """Make the index what the cairn before these figures wrote: format 1, summaries without them."""
    env = lmdb.open(str(root / "index"), max_dbs=8)
    meta, sessions = env.open_db(b"meta"), env.open_db(b"sessions")
    new = ("prompt_tokens", "completion_tokens", "prompt_reports", "completion_reports")
    with env.begin(write=True) as txn:
        txn.put(b"format", b"cairn-index-1", db=meta)
        for key, value in list(txn.cursor(db=sessions)):
            summary = msgspec.msgpack.decode(value)
            summary["usage_tokens"] = summary.pop("last_usage_total_tokens")
            for name in new:
                del summary[name]
            txn.put(key, msgspec.msgpack.encode(summary), db=sessions)
    env.close()


def test_an_index_from_before_the_figures_is_rebuilt_not_read_as_zeros(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "store"
    _store(root)
    rebuilt = index_dump(root)
    _downgrade(root)
    assert cli.main(["sessions", "--store", str(root), "--json"]) == 0  # a reader: a private rebuild
    listed = {s["sid"]: s for s in json.loads(capsys.readouterr().out)}
    assert listed["all"]["prompt_tokens"] == 3003 and listed["none"]["prompt_tokens"] is None
    with Journal.open(root) as journal:  # a writer rebuilds the store's own
        assert "cairn-index-1" in journal.recovery.index_rebuilt
        assert journal.session("all").prompt_tokens == 3003  # type: ignore[union-attr]
    assert index_dump(root) == rebuilt


def test_verify_calls_an_index_of_an_older_format_outdated_a_warning_not_a_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "store"
    _store(root)
    _downgrade(root)  # what an older cairn left: not damage, rebuilt at the next open for writing
    report = verify_store(root)
    assert report.ok and not report.problems
    assert [w.code for w in report.warnings] == ["index-outdated"]
    assert cli.main(["verify", "--store", str(root)]) == 0
    assert "index-outdated" in capsys.readouterr().out


def test_verify_calls_an_index_of_a_foreign_format_a_problem(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _store(root)
    env = lmdb.open(str(root / "index"), max_dbs=8)
    meta = env.open_db(b"meta")  # before the write transaction, which open_db would wait for
    with env.begin(write=True) as txn:
        txn.put(b"format", b"not-an-index-of-ours", db=meta)
    env.close()
    report = verify_store(root)
    assert [p.code for p in report.problems] == ["index-unreadable"]
