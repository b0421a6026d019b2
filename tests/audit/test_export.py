"""`cairn export --format parquet|csv`: the tables, read back with DuckDB and pyarrow, against the log.

The store (conftest) holds every event kind, two forks, a blob and one
session with a corrupted line. Every count and sum of the export is
compared with the log read through `Journal.read` and with the index's
session summaries; the turn of a usage row is checked against its request.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cairn import cli
from cairn.audit import ExtraMissing, require
from cairn.audit.export import MANIFEST
from cairn.audit.tables import TABLES, columns, table_of
from cairn.events.kinds import EVENT_TYPES, CheckpointCommitted, Request, Usage
from cairn.events.model import BlobPart
from cairn.store import Journal
from tests.audit.conftest import BROKEN
from tests.store.helpers import msg

EVERY_KIND = {str(cls.__struct_config__.tag) for cls in EVENT_TYPES}
ARROW = {
    "string": pa.string(),
    "int64": pa.int64(),
    "bool": pa.bool_(),
    "timestamp": pa.timestamp("ms", tz="UTC"),
    "json": pa.string(),
}


def export(store: Path, to: Path, *extra: str, fmt: str = "parquet") -> int:
    return cli.main(["export", "--store", str(store), "--format", fmt, "--to", str(to), *extra])


def sound_sessions(store: Path) -> list[str]:
    with Journal.open(store, readonly=True) as journal:
        return [s.sid for s in journal.sessions() if s.sid != BROKEN]


def log_records(store: Path) -> dict[str, list[Any]]:
    with Journal.open(store, readonly=True) as journal:
        return {sid: list(journal.read(sid)) for sid in sound_sessions(store)}


def sql(query: str) -> list[tuple[Any, ...]]:
    return duckdb.connect().sql(query).fetchall()


@pytest.fixture(scope="module")
def exported(pristine: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    to = tmp_path_factory.mktemp("export") / "tables"
    assert export(pristine, to) == 1  # 1: a session was skipped as corrupt
    return to


def t(to: Path, table: str, fmt: str = "parquet") -> str:
    return f"'{to}/{table}/*.{fmt}'"


def test_the_store_holds_every_kind_forks_blobs_and_a_broken_session(pristine: Path) -> None:
    with Journal.open(pristine, readonly=True) as journal:
        kinds = {kind for s in journal.sessions() if s.sid != BROKEN for kind in s.counts}
        assert kinds == EVERY_KIND
        assert journal.session(BROKEN) is not None
    assert any(p.is_file() for p in (pristine / "blobs").rglob("*"))


def test_every_table_has_its_documented_schema(exported: Path) -> None:
    for table in TABLES:
        files = sorted((exported / table).glob("*.parquet"))
        assert [f.name for f in files] == ["part-000001.parquet"]
        schema = pq.read_schema(files[0])
        assert [(f.name, f.type) for f in schema] == [(n, ARROW[k]) for n, k in columns(table)]


def test_events_per_kind_per_session_equal_the_log_and_the_index(pristine: Path, exported: Path) -> None:
    records = log_records(pristine)
    from_log = Counter((sid, r.kind) for sid, rs in records.items() for r in rs)
    in_events = dict(
        ((sid, kind), n)
        for sid, kind, n in sql(f"select sid, kind, count(*) from {t(exported, 'events')} group by all")
    )
    assert in_events == from_log
    per_table: dict[tuple[str, str], int] = {}
    for kind in EVERY_KIND:
        for sid, n in sql(f"select sid, count(*) from {t(exported, table_of(kind))} group by sid"):
            per_table[(sid, kind)] = n
    assert per_table == from_log
    with Journal.open(pristine, readonly=True) as journal:
        from_index = {
            (s.sid, k): n for s in journal.sessions() if s.sid != BROKEN for k, n in s.counts.items()
        }
    assert from_index == from_log
    assert set(sql(f"select distinct kind from {t(exported, 'events')}")) == {(k,) for k in EVERY_KIND}


def test_seqs_run_from_one_without_gaps_and_keys_are_unique(pristine: Path, exported: Path) -> None:
    with Journal.open(pristine, readonly=True) as journal:
        last = {s.sid: s.last_seq for s in journal.sessions() if s.sid != BROKEN}
    rows = sql(
        "select sid, min(seq), max(seq), count(*), count(distinct seq) "
        f"from {t(exported, 'events')} group by sid"
    )
    assert {sid: (lo, hi, n, d) for sid, lo, hi, n, d in rows} == {
        sid: (1, n, n, n) for sid, n in last.items()
    }
    table = pq.read_table(exported / "events")
    positions = table.column("pos").to_pylist()
    assert len(set(positions)) == len(positions)


def test_tokens_per_session_and_per_turn_equal_the_log(pristine: Path, exported: Path) -> None:
    records = log_records(pristine)
    per_session: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    per_turn: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for sid, rs in records.items():
        turn_of_request = {r.event.request_id: r.event.turn_id for r in rs if isinstance(r.event, Request)}
        for r in rs:
            if isinstance(r.event, Usage):
                u = r.event
                figures = per_session[sid]
                figures[0] += u.prompt_tokens or 0
                figures[1] += u.completion_tokens or 0
                figures[2] += u.total_tokens or 0
                turn = per_turn[(sid, turn_of_request[u.request_id])]
                turn[0] += 1
                turn[1] += u.total_tokens or 0
    got = sql(
        f"select sid, sum(prompt_tokens), sum(completion_tokens), sum(total_tokens) "
        f"from {t(exported, 'usage')} group by sid"
    )
    assert {sid: [p, c, tot] for sid, p, c, tot in got} == dict(per_session)
    with Journal.open(pristine, readonly=True) as journal:
        for s in journal.sessions():
            if s.sid in per_session:
                assert per_session[s.sid][:2] == [s.prompt_tokens, s.completion_tokens]
    got_turns = sql(
        f"select sid, turn_id, count(*), sum(total_tokens) from {t(exported, 'usage')} group by all"
    )
    assert {(sid, turn): [n, tot] for sid, turn, n, tot in got_turns} == dict(per_turn)
    # every usage row lies inside its turn: after the turn-started, before its end
    outside = sql(
        f"""with bounds as (
              select sid, turn_id, min(seq) as first, max(seq) as last from {t(exported, "events")}
              where kind in ('turn-started', 'turn-completed', 'turn-failed', 'turn-cancelled')
              group by all)
            select count(*) from {t(exported, "usage")} u join bounds b using (sid, turn_id)
            where u.seq < b.first or u.seq > b.last"""
    )
    assert outside == [(0,)]
    assert sql(f"select count(*) from {t(exported, 'usage')} where turn_id is null") == [(0,)]


def test_checkpoints_and_their_reductions_equal_the_log(pristine: Path, exported: Path) -> None:
    expected: dict[str, tuple[int, int, int]] = {}
    with Journal.open(pristine, readonly=True) as journal:
        for sid, rs in log_records(pristine).items():
            cps = [r.event for r in rs if isinstance(r.event, CheckpointCommitted)]
            assert len(cps) == len(journal.checkpoints(sid))
            if cps:
                expected[sid] = (
                    len(cps),
                    sum(c.source_tokens for c in cps),
                    sum(c.source_tokens - c.replacement_tokens for c in cps),
                )
    assert expected, "the store holds checkpoints"
    got = sql(
        f"select sid, count(*), sum(source_tokens), sum(reduction_tokens) "
        f"from {t(exported, 'checkpoint_committed')} group by sid"
    )
    assert {sid: (n, s, r) for sid, n, s, r in got} == expected


def test_blobs_are_referenced_by_hash_with_their_size(pristine: Path, exported: Path) -> None:
    rows = sql(f"select sid, kind, location, sha256, size from {t(exported, 'blobs')}")
    from_log = {
        (sid, r.kind, f"content[{i}]", part.sha256, part.size)
        for sid, rs in log_records(pristine).items()
        for r in rs
        for i, part in enumerate(getattr(r.event, "content", ()) or ())
        if isinstance(part, BlobPart)
    }
    assert from_log and set(rows) == from_log
    for _sid, _kind, _where, sha, size in rows:
        assert (pristine / "blobs" / sha[:2] / sha[2:]).stat().st_size == size


def test_forks_name_their_parent(exported: Path) -> None:
    rows = sql(
        f"select sid, parent_session from {t(exported, 'session_started')} where parent_session is not null"
    )
    assert sorted(rows) == [("demo-1-fork", "demo-1"), ("extra-fork", "extra")]


def test_the_corrupt_session_is_reported_and_absent(exported: Path) -> None:
    manifest = json.loads((exported / MANIFEST).read_text())
    (run,) = manifest["runs"]
    assert [s["sid"] for s in run["skipped"]] == [BROKEN]
    assert "checksum mismatch" in run["skipped"][0]["error"]
    for table in TABLES:
        assert sql(f"select count(*) from {t(exported, table)} where sid = '{BROKEN}'") == [(0,)]


def test_tool_calls_and_results_join_on_sid_and_call_id(exported: Path) -> None:
    unmatched = sql(
        f"select count(*) from {t(exported, 'tool_result')} r anti join {t(exported, 'tool_calls')} c "
        "using (sid, call_id)"
    )
    assert unmatched == [(0,)]
    assert sql(f"select count(*) from {t(exported, 'tool_calls')} where tool_name = 'big'") == [(2,)]


def test_since_appends_only_newer_rows_and_the_union_equals_a_full_export(
    store: Path, tmp_path: Path
) -> None:
    inc, full = tmp_path / "inc", tmp_path / "full"
    assert export(store, inc) == 1
    first = json.loads((inc / MANIFEST).read_text())["next_since"]
    with Journal.open(store) as journal:
        last = journal.last_seq("extra")
        journal.append("extra", [msg(200, "later"), msg(201, "later still")], expected_seq=last)
        journal.append("new-one", [msg(1, "a new session")], expected_seq=0)
    assert export(store, inc, "--since", "0") == 2  # would repeat rows: refused
    assert export(store, tmp_path / "past", "--since", "999999") == 2  # would skip rows later: refused
    assert not (tmp_path / "past").exists()
    assert export(store, inc, "--since", str(first)) == 0  # the broken session has no new lines
    manifest = json.loads((inc / MANIFEST).read_text())
    assert [r["since"] for r in manifest["runs"]] == [0, first]
    assert manifest["runs"][1]["rows"]["events"] == 3
    assert sorted(sql(f"select sid, seq, pos >= {first} from '{inc}/events/part-000002.parquet'")) == [
        ("extra", last + 1, True),
        ("extra", last + 2, True),
        ("new-one", 1, True),
    ]
    assert export(store, full) == 1
    for table in TABLES:
        assert sql(f"select * from {t(inc, table)} except all select * from {t(full, table)}") == [], table
        a = sql(f"select count(*) from {t(inc, table)}")
        b = sql(f"select count(*) from {t(full, table)}")
        assert a == b, table


def test_csv_has_the_same_rows(pristine: Path, exported: Path, tmp_path: Path) -> None:
    to = tmp_path / "csv"
    assert export(pristine, to, fmt="csv") == 1
    for table in TABLES:
        a = sql(f"select count(*) from read_csv({t(to, table, 'csv')}, header=true)")
        b = sql(f"select count(*) from {t(exported, table)}")
        assert a == b, table
    got = sql(
        f"select sid, sum(total_tokens) from read_csv({t(to, 'usage', 'csv')}, header=true) "
        "group by sid order by sid"
    )
    assert got == sql(f"select sid, sum(total_tokens) from {t(exported, 'usage')} group by sid order by sid")


def test_hostile_targets_and_arguments_are_refused_before_anything_is_written(
    pristine: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("mine")
    outside = tmp_path / "outside"
    outside.mkdir()
    link = tmp_path / "link"
    link.symlink_to(outside)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    assert export(pristine, a_file) == 2
    assert a_file.read_text() == "mine"
    assert export(pristine, link) == 2
    assert list(outside.iterdir()) == []
    assert export(pristine, busy) == 2
    assert [p.name for p in busy.iterdir()] == ["notes.txt"]
    for bad in ("../evil", "x" * 200, "nope"):
        target = tmp_path / f"t-{len(bad)}"
        assert export(pristine, target, "--session", bad) == 2
        assert not target.exists()
    # a table folder that is a link, inside an existing export
    ok = tmp_path / "ok"
    assert export(pristine, ok, "--session", "extra") == 0
    os.rename(ok / "usage", tmp_path / "usage-moved")
    (ok / "usage").symlink_to(outside)
    assert export(pristine, ok, "--session", "extra") == 2
    assert list(outside.iterdir()) == []
    # another format into the same directory, --session / --since without --format
    assert export(pristine, ok, "--session", "extra", fmt="csv") == 2
    assert cli.main(["export", "--store", str(pristine), "--to", str(tmp_path / "n"), "--since", "3"]) == 2
    assert not (tmp_path / "n").exists()
    err = capsys.readouterr().err
    assert "symbolic link" in err and "not empty" in err and "invalid session id" in err


def test_a_missing_extra_is_one_line_naming_it(
    pristine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(ExtraMissing):
        require("pyarrow")
    assert export(pristine, tmp_path / "x") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["cairn: this command needs pyarrow, from the audit extra: pip install 'cairn[audit]'"]
    assert not (tmp_path / "x").exists()


def test_pandas_reads_token_columns_as_integers(exported: Path) -> None:
    pd = pytest.importorskip("pandas")
    frame = pd.read_parquet(exported / "usage", dtype_backend="numpy_nullable")
    assert str(frame["prompt_tokens"].dtype) == "Int64"
    assert str(frame["cached_prompt_tokens"].dtype) == "Int64"
    assert str(frame["ts"].dtype).startswith("datetime64[ms, UTC]")


def test_duckdb_reads_every_field_of_the_raw_log(pristine: Path) -> None:
    """The README's raw-JSONL reading: sample_size=-1 sees fields that first appear late in the log."""
    lines = [
        json.loads(x) for f in sorted((pristine / "log").glob("*.jsonl")) for x in f.read_text().splitlines()
    ]
    late = [x for x in lines if x["kind"] == "owner-changed"]
    assert late and lines.index(late[0]) > 2000  # its fields first appear past line 2,000 ...
    got = sql(
        f"select count(*), count(event.host_id), sum(event.lease_revision) "
        f"from read_json('{pristine}/log/*.jsonl', format='newline_delimited', sample_size=-1)"
    )
    assert got == [(len(lines), 1, 7)]


def test_duckdb_reads_the_raw_log_with_explicit_columns(pristine: Path) -> None:
    """The README's other raw-JSONL reading: the envelope typed, the body as JSON (no inference at all)."""
    got = sql(
        "select count(*), sum((event->>'total_tokens')::BIGINT) filter (where kind = 'usage'), "
        "count(*) filter (where event->>'host_id' = 'host-b') "
        f"from read_json('{pristine}/log/*.jsonl', format='newline_delimited', "
        "columns={sid: 'VARCHAR', seq: 'BIGINT', pos: 'BIGINT', ts: 'BIGINT', kind: 'VARCHAR', "
        "event: 'JSON'})"
    )
    with Journal.open(pristine, readonly=True) as journal:
        lines = sum(s.last_seq for s in journal.sessions())
        total = sum(
            r.event.total_tokens or 0
            for s in journal.sessions()
            if s.sid != BROKEN
            for r in journal.read(s.sid)
            if isinstance(r.event, Usage)
        )
    assert got == [(lines, total + 109, 1)]  # 109: the broken session's one usage line (105 + 4)


def test_the_module_doc_names_every_table_and_column() -> None:
    from cairn.audit import tables

    doc = tables.__doc__ or ""
    for table in TABLES:
        assert f"\n    {table} " in doc, table
        for name, _kind in columns(table):
            assert name in doc, (table, name)


def test_rows_are_written_in_batches(pristine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cairn.audit import export as export_module

    monkeypatch.setattr(export_module, "BATCH_ROWS", 100)
    to = tmp_path / "batched"
    assert export(pristine, to) == 1
    events = pq.ParquetFile(to / "events" / "part-000001.parquet")
    groups = [events.metadata.row_group(i).num_rows for i in range(events.metadata.num_row_groups)]
    assert max(groups) == 100 and len(groups) > 20
    assert sum(groups) == sql(f"select count(*) from {t(to, 'events')}")[0][0]


def test_tables_come_from_a_local_store_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    to = tmp_path / "t"
    argv = ["export", "--nats", "nats://127.0.0.1:1", "--format", "parquet", "--to", str(to)]
    assert cli.main(argv) == 2
    assert "--format reads a local store" in capsys.readouterr().err
    assert not to.exists()


def test_a_result_of_a_servers_tool_names_the_server_and_its_tool_and_the_hosts_own_name_none(
    exported: Path,
) -> None:
    """Issue 26 point 3: `tool_result.server` and `server_tool` (the every-kind store's `big` comes back
    as an MCP server's tool does); null for the host's own tools."""
    named = sql(
        f"select distinct tool_name, server, server_tool from {t(exported, 'tool_result')} "
        "where server is not null"
    )
    assert named == [("big", "bigs", "make_big")]
    unnamed = sql(
        f"select count(*) from {t(exported, 'tool_result')} where server is null and server_tool is null"
    )
    assert unnamed[0][0] > 0


def test_each_usage_row_names_its_requests_model_and_the_answers_times(exported: Path) -> None:
    """Issue 27: latency and model per request in the derived tables. The times come from the log's
    assistant messages (ms from sending the request to the first output and to the answer's end)."""
    joined = sql(
        f"select u.model, r.model, u.first_output_ms, a.first_output_ms, u.response_ms, a.response_ms "
        f"from {t(exported, 'usage')} u join {t(exported, 'request')} r using (sid, request_id) "
        f"join {t(exported, 'assistant_message')} a using (sid, request_id)"
    )
    assert joined and all(row[0] == row[1] and row[2] == row[3] and row[4] == row[5] for row in joined)
    timed = [row for row in joined if row[4] is not None]
    assert timed and all(0 <= row[2] <= row[4] for row in timed)
    orphans = sql(
        f"select count(*) from {t(exported, 'usage')} u anti join {t(exported, 'request')} r "
        "using (sid, request_id) where u.model is not null"
    )
    assert orphans == [(0,)]


def test_a_run_with_nothing_new_says_so_in_words() -> None:
    """An empty incremental run printed `positions 3143..3142`."""
    from cairn.audit.command import positions

    assert positions(5, 10) == "positions 5..9"
    assert positions(3143, 3143) == "no new positions (from 3143)"
