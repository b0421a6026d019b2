"""A clock that gives no time a line can carry (issue 23 point 4): its appends are refused before
anything is written, and a log that holds such a time from before this check (written here by a
writer with the check taken out) is reported by `verify` and read by every audit command without a
traceback."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cairn import Host, SessionSettings, WorkspaceTools, cli
from cairn.actors.provider.scripted import Reply, ScriptedProvider
from cairn.events.model import ToolCall
from cairn.store import BadClock, Journal, verify_store
from tests.store.helpers import msg, segment_files, started


def _raises() -> int:
    raise RuntimeError("no time source")


BAD_CLOCKS: list[tuple[str, Callable[[], object], str]] = [
    ("negative", lambda: -5, "the clock gave -5, not a time in 0..2**63-1 unix ms"),
    ("2**63", lambda: 2**63, f"the clock gave {2**63}, not a time in 0..2**63-1 unix ms"),
    ("over uint64", lambda: 2**64 + 3, f"the clock gave {2**64 + 3}, not"),
    ("float", lambda: 1.7e12, "the clock gave 1700000000000.0, not"),
    ("bool", lambda: True, "the clock gave True, not"),
    ("str", lambda: "now", "the clock gave 'now', not"),
    ("raises", _raises, "the clock raised RuntimeError: no time source; nothing was written"),
]


def _log_bytes(root: Path) -> bytes:
    return b"".join(path.read_bytes() for path in segment_files(root))


@pytest.mark.parametrize(
    ("clock", "said"), [(c, s) for _, c, s in BAD_CLOCKS], ids=[n for n, _, _ in BAD_CLOCKS]
)
def test_a_bad_clocks_append_is_refused_and_nothing_is_written(
    tmp_path: Path, clock: Callable[[], object], said: str
) -> None:
    """Before this check -5 and 2**63 were written (and 2**64 + 3 broke the writer: the append
    timed out after 30 s). Now the append fails with `BadClock`, the log is unchanged, and the
    writer goes on: an append with its own `ts_ms` lands."""
    now: list[Callable[[], object]] = [lambda: 1_000]
    with Journal.open(tmp_path / "store", clock_ms=lambda: now[0]()) as journal:  # type: ignore[arg-type,return-value]
        journal.append("s", [started()], expected_seq=0)
        before = _log_bytes(journal.root)
        now[0] = clock
        with pytest.raises(BadClock) as refused:
            journal.append("s", [msg(2)], expected_seq=1, timeout=10)
        assert said in str(refused.value)
        future = journal.append_async("s", [msg(2)], expected_seq=1)
        with pytest.raises(BadClock):
            future.result(10)
        assert _log_bytes(journal.root) == before and journal.last_seq("s") == 1
        [record] = journal.append("s", [msg(2)], expected_seq=1, ts_ms=2_000, timeout=10)
        assert record.ts == 2_000
    assert verify_store(tmp_path / "store").ok


def test_a_host_on_a_bad_clock_refuses_the_turn_naming_the_clock(tmp_path: Path) -> None:
    """`Host.open(clock_ms=...)` giving -5: the message is refused (nothing recorded), the result
    names the clock, and the store verifies clean."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    provider = ScriptedProvider(turns=(Reply(text="never"),))
    settings = SessionSettings(model="m", context_window=32_000)
    with Host.open(
        tmp_path / "store", provider=provider, tools=WorkspaceTools(), clock_ms=lambda: -5, settings=settings
    ) as host:
        result = host.send("s", "hello", workspace=workspace).result(30)
        assert result.status == "rejected" and result.error_class == "BadClock", result
        assert "the clock gave -5" in result.error
        assert list(host.journal.read("s")) == []
    assert verify_store(tmp_path / "store").ok


@pytest.fixture(scope="module")
def old_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Sessions whose lines carry -5, 2**63 and 0 as their time, written by a writer without the
    clock check (as before it): a tool call, its result, a reply each."""
    root = tmp_path_factory.mktemp("old-clock") / "store"
    workspace = root.parent / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("hello\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("cairn.store.group_commit.read_clock", lambda clock: clock())
        for sid, ts in (("negative", -5), ("far", 2**63), ("zero", 0)):
            provider = ScriptedProvider(
                turns=(
                    Reply(text="reading", tool_calls=(ToolCall("c1", "read", '{"path": "a.txt"}'),)),
                    Reply(text="done"),
                )
            )
            settings = SessionSettings(model="m", context_window=32_000)
            with Host.open(
                root, provider=provider, tools=WorkspaceTools(), clock_ms=lambda t=ts: t, settings=settings
            ) as host:
                assert host.send(sid, "read a.txt", workspace=workspace).result(30).ok
    yield root


def test_verify_reports_each_line_whose_time_is_out_of_range(old_store: Path) -> None:
    report = verify_store(old_store)
    bad = [p for p in report.problems if p.code == "bad-ts"]
    assert {p.sid for p in bad} == {"negative", "far"} and len(bad) == len(report.problems)
    assert f"ts {2**63} is outside 0..2**63-1 unix ms" in {p.message for p in bad}


def test_every_audit_command_reads_out_of_range_times_without_a_traceback(
    old_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: `cairn export --format parquet` (and csv) died with an OverflowError traceback on
    ts 2**63. Now the export writes null there (it fits no int64) and every command exits as it
    should: 0, or 1 for `verify` and `report`, which report the lines."""
    from tests.audit.test_otlp import Receiver

    commands: list[list[str]] = [["sessions"], ["interrupted"], ["verify"]]
    for sid in ("negative", "far", "zero"):
        commands += [
            ["log", sid],
            ["log", sid, "--json"],
            ["checkpoints", sid],
            ["replay", sid],
            ["context", sid],
        ]
        commands += [["timeline", sid, "--out", str(tmp_path / f"{sid}.png")]]
    for fmt in ("parquet", "csv"):
        commands.append(["export", "--format", fmt, "--to", str(tmp_path / f"export-{fmt}")])
    commands.append(["report", "--out", str(tmp_path / "report")])
    with Receiver() as receiver:
        commands.append(["export", "--format", "otlp", "--otlp-endpoint", receiver.url])
        for command in commands:
            code = cli.main([*command, "--store", str(old_store)])
            out, err = capsys.readouterr()
            assert "Traceback" not in err and "Error" not in err.replace("bad-ts", ""), (command, err)
            # 1: `verify` and `report` say the store has problems (the `bad-ts` lines)
            assert code == (1 if command[0] in ("verify", "report") else 0), (command, code, out[-500:], err)
        assert receiver.requests
    import pyarrow.parquet as pq  # the audit extra, which the export needs

    table = pq.read_table(tmp_path / "export-parquet" / "events").to_pydict()
    times = dict(zip(zip(table["sid"], table["seq"], strict=True), table["ts"], strict=True))
    assert times[("far", 1)] is None and times[("negative", 1)] is not None


def test_the_report_of_a_store_whose_times_are_out_of_range_charts_only_the_times_it_can_show(
    old_store: Path, tmp_path: Path
) -> None:
    """The store chart (issue 27) met ts 2**63 and died in matplotlib: such times are left out; a
    store with none it can show has no chart, and its index links none."""
    out = tmp_path / "report"
    assert cli.main(["report", "--store", str(old_store), "--out", str(out)]) == 1
    index = (out / "index.html").read_text(encoding="utf-8")
    assert ('src="store.svg"' in index) == (out / "store.svg").exists()
