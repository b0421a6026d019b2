"""`cairn sessions|log|checkpoints|replay|context|verify --nats` read a cluster store as they read a
local one, `cairn export` writes it as a local store, and a cluster that is not there is one line, exit 2.

One store is written on the shared cluster, on a layout of its own (the CLI's
`--nats-layout NAME`), by the unchanged Host over a `JetStreamJournal` with the
scripted provider (turns with tools, a compaction's checkpoint). Every read
command then runs on the cluster and on its export and must print the same
(positions aside: a cluster line's `pos` is seq - 1, an exported line's is
its global place).
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import crc32c
import pytest

from cairn import cli
from cairn.events.codec import chain_digest
from cairn.events.kinds import CheckpointCommitted
from cairn.store.jetstream.layout import Layout
from cairn.store.jetstream.local_cluster import LocalCluster
from tests.actors.helpers import WAIT, Seed, open_host, scripted
from tests.cluster.js_helpers import open_journal
from tests.store.helpers import msg, started

SESSIONS = ("a", "b.c", "big")
#: the probe's bound (`PROBE_TIMEOUT_S`, 5 s) plus room for a loaded machine
UNREACHABLE_WITHIN_S = 8.0
#: what a summary holds of positions and the chain, which differ between the cluster and its export
POSITIONS = {"head", "last_pos", "checkpoint_pos"}


@dataclass(frozen=True)
class Written:
    url: str
    layout: str
    export: Path

    @property
    def nats(self) -> list[str]:
        return ["--nats", self.url, "--nats-layout", self.layout]

    @property
    def store(self) -> list[str]:
        return ["--store", str(self.export)]


def run(argv: list[str]) -> tuple[int, str, str]:
    """`cairn argv` in this process: its exit code, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def written(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Written]:
    """A cluster store of three sessions (tools, a checkpoint) and its export by `cairn export`."""
    tmp = tmp_path_factory.mktemp("cli-nats")
    name = uuid.uuid4().hex[:10]
    journal = open_journal(cluster, Layout.named(name))
    try:
        host = open_host(tmp / "unused", scripted(), journal=journal)
        for sid in ("a", "b.c"):
            assert host.send(sid, f"hello {sid}: tools 2 x 30 #{sid}", workspace=tmp).result(WAIT).ok
            assert host.send(sid, "and again").result(WAIT).ok
        big = Seed(host.journal, "big", str(tmp))
        for _ in range(10):
            big.turn(tools=[1_000])
        record = host.compact("big").record
        assert record is not None and isinstance(record.event, CheckpointCommitted)
        assert host.send("big", "after the checkpoint").result(WAIT).ok
        host.close()
    finally:
        journal.close()
    export = tmp / "export"
    code, out, err = run(["export", "--nats", cluster.url, "--nats-layout", name, "--to", str(export)])
    assert (code, err) == (0, ""), err
    assert out.startswith("exported 3 sessions, ")
    yield Written(cluster.url, name, export)


def without(data: object, keys: set[str]) -> object:
    """`data` with the given keys dropped from every dict in it."""
    if isinstance(data, dict):
        return {k: without(v, keys) for k, v in data.items() if k not in keys}
    if isinstance(data, list):
        return [without(v, keys) for v in data]
    return data


def json_lines(text: str) -> list[object]:
    return [json.loads(line) for line in text.splitlines()]


def test_sessions_on_the_cluster_list_the_same_columns_and_figures_as_on_its_export(written: Written) -> None:
    code, cluster_text, err = run(["sessions", *written.nats])
    assert (code, err) == (0, "")
    assert run(["sessions", *written.store]) == (0, cluster_text, "")
    header = cluster_text.splitlines()[0].split()
    assert header[:4] == ["session", "events", "model", "updated"]
    assert [line.split()[0] for line in cluster_text.splitlines()[1:4]] == list(SESSIONS)

    code, cluster_json, _ = run(["sessions", "--json", *written.nats])
    local_json = run(["sessions", "--json", *written.store])[1]
    on_cluster, local = json.loads(cluster_json), json.loads(local_json)
    assert [s["sid"] for s in on_cluster] == list(SESSIONS)
    # the chain digest and the places are the only differences (pos, prev and crc differ)
    assert without(on_cluster, POSITIONS) == without(local, POSITIONS)
    big = next(s for s in on_cluster if s["sid"] == "big")
    assert big["checkpoint_seq"] > 0 and big["counts"]["tool-result"] == 10
    assert [s["last_pos"] for s in on_cluster] == [s["last_seq"] - 1 for s in on_cluster]


@pytest.mark.parametrize("sid", SESSIONS)
def test_log_on_the_cluster_lists_the_same_seqs_kinds_and_events_as_on_its_export(
    written: Written, sid: str
) -> None:
    code, text, err = run(["log", sid, *written.nats])
    assert (code, err) == (0, "")
    assert run(["log", sid, *written.store]) == (0, text, "")

    code, lines, err = run(["log", sid, "--json", *written.nats])
    assert (code, err) == (0, "")
    on_cluster, local = json_lines(lines), json_lines(run(["log", sid, "--json", *written.store])[1])
    assert [r["seq"] for r in on_cluster] == list(range(1, len(on_cluster) + 1))
    assert [r["pos"] for r in on_cluster] == [r["seq"] - 1 for r in on_cluster]  # the cluster's pos
    assert without(on_cluster, {"pos"}) == without(local, {"pos"})
    kinds = {r["kind"] for r in on_cluster}
    assert {"session-started", "user-message", "assistant-message", "turn-completed"} <= kinds
    if sid == "big":
        assert {"tool-result", "checkpoint-committed"} <= kinds

    code, some, _ = run(["log", sid, "--json", "--kind", "user-message", "--from", "2", *written.nats])
    assert code == 0
    assert json_lines(some) == [r for r in on_cluster if r["kind"] == "user-message" and r["seq"] >= 2]


@pytest.mark.parametrize("command", ["checkpoints", "replay", "context"])
@pytest.mark.parametrize("sid", SESSIONS)
def test_checkpoints_replay_and_context_on_the_cluster_print_what_they_print_on_its_export(
    written: Written, command: str, sid: str
) -> None:
    for mode in ([], ["--json"]):
        code, out, err = run([command, sid, *mode, *written.nats])
        assert (code, err) == (0, "")
        assert run([command, sid, *mode, *written.store]) == (0, out, "")
    checkpoints = json.loads(run(["checkpoints", sid, "--json", *written.nats])[1])
    assert len(checkpoints) == (1 if sid == "big" else 0)


def test_replay_until_a_seq_on_the_cluster_folds_the_same_state_as_on_its_export(written: Written) -> None:
    out = run(["replay", "big", "--until", "7", "--json", *written.nats])[1]
    assert json.loads(out)["last_seq"] == 7
    assert run(["replay", "big", "--until", "7", "--json", *written.store])[1] == out


def test_verify_on_the_cluster_and_on_its_export_finds_no_problem(written: Written) -> None:
    code, out, err = run(["verify", *written.nats])
    assert (code, err) == (0, "")
    assert out.startswith("ok {")
    report = json.loads(run(["verify", "--json", *written.nats])[1])
    assert report["ok"] is True and report["sessions"] == 3 and report["problems"] == []
    code, local, _ = run(["verify", "--json", *written.store])
    assert code == 0
    assert json.loads(local)["ok"] is True and json.loads(local)["lines"] == report["lines"]


def test_an_unreachable_cluster_is_one_line_and_exit_2_within_seconds() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for argv in (["sessions"], ["log", "a"], ["verify", "--json"], ["export", "--to", "/nonexistent/x"]):
        started = time.monotonic()
        code, out, err = run([*argv, "--nats", f"nats://127.0.0.1:{port}"])
        assert time.monotonic() - started < UNREACHABLE_WITHIN_S
        assert (code, out) == (2, "")
        assert len(err.splitlines()) == 1 and "ClusterUnreachable: every server at" in err, err


def test_a_cluster_without_a_cairn_store_of_the_layout_is_exit_2_and_is_left_without_one(
    cluster: LocalCluster,
) -> None:
    name = uuid.uuid4().hex[:10]
    code, out, err = run(["sessions", "--nats", cluster.url, "--nats-layout", name])
    assert (code, out) == (2, "")
    assert len(err.splitlines()) == 1 and f"no stream CAIRN_EVENTS_{name}" in err
    assert run(["sessions", "--nats", cluster.url, "--nats-layout", name])[0] == 2  # still none made


def test_nats_and_store_together_are_a_usage_error(written: Written) -> None:
    code, out, err = run(["sessions", *written.nats, *written.store])
    assert (code, out) == (2, "")
    assert err == "cairn: --nats and --store are exclusive: read either a cluster or a local store\n"


def test_cairn_nats_in_the_environment_gives_the_url_and_a_store_flag_overrides_it(
    written: Written, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CAIRN_STORE", raising=False)
    monkeypatch.setenv("CAIRN_NATS", written.url)
    monkeypatch.setenv("CAIRN_NATS_LAYOUT", written.layout)
    code, from_env, _ = run(["sessions", "--json"])
    assert code == 0 and [s["sid"] for s in json.loads(from_env)] == list(SESSIONS)
    code, local, _ = run(["sessions", "--json", *written.store])
    assert code == 0 and [s["last_pos"] for s in json.loads(local)] != [
        s["last_pos"] for s in json.loads(from_env)
    ]  # the export's global positions: the local store was read
    monkeypatch.setenv("CAIRN_STORE", str(written.export))
    code, _, err = run(["sessions"])
    assert code == 2 and "both $CAIRN_NATS and $CAIRN_STORE" in err


def test_export_refuses_a_directory_that_is_not_empty_and_writes_nothing_there(
    written: Written, tmp_path: Path
) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    code, out, err = run(["export", *written.nats, "--to", str(tmp_path)])
    assert (code, out) == (2, "")
    assert len(err.splitlines()) == 1 and "not an empty directory" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]
    assert run(["export", "--to", str(tmp_path / "new"), *written.store])[0] == 2  # no cluster named
    code, out, _ = run(["export", *written.nats, "--to", str(tmp_path / "new"), "--json"])
    assert code == 0 and json.loads(out)["sessions"] == 3


def test_a_session_the_cluster_does_not_hold_is_a_usage_error(written: Written) -> None:
    code, out, err = run(["log", "nobody", *written.nats])
    assert (code, out) == (2, "")
    assert err.startswith("cairn: no session 'nobody' in the cluster at ")


def test_the_installed_cairn_script_reads_the_cluster_and_its_log_pipes_through_jq(written: Written) -> None:
    cairn = Path(sys.executable).with_name("cairn")
    jq = shutil.which("jq")
    assert cairn.is_file() and jq is not None
    listed = subprocess.run(
        [str(cairn), "log", "big", "--json", *written.nats], capture_output=True, timeout=120, check=True
    )
    kinds = subprocess.run(
        [jq, "-r", ".kind"], input=listed.stdout, capture_output=True, timeout=30, check=True
    ).stdout.decode()
    on_cluster = json_lines(run(["log", "big", "--json", *written.nats])[1])
    assert kinds.splitlines() == [r["kind"] for r in on_cluster]  # type: ignore[index]
    assert "checkpoint-committed" in kinds.splitlines()
    verified = subprocess.run(
        [str(cairn), "verify", *written.nats], capture_output=True, timeout=120, check=False
    )
    assert verified.returncode == 0 and verified.stdout.decode().startswith("ok ")


def test_log_on_the_cluster_lists_a_newer_kind_by_its_envelope_and_warns(cluster: LocalCluster) -> None:
    name = uuid.uuid4().hex[:10]
    journal = open_journal(cluster, Layout.named(name))
    try:
        journal.append("s", [started(), msg(1)], expected_seq=0)
        subject = journal.layout.subject("s")
        last = journal._call(journal._reader.last(subject))
        assert last is not None
        envelope = {
            "v": 1,
            "pos": 2,
            "sid": "s",
            "seq": 3,
            "ts": 1_800_000_000_000,
            "prev": chain_digest(last.data),
            "kind": "from-a-newer-cairn",
            "event": {"kind": "from-a-newer-cairn", "detail": 1},
        }
        prefix = json.dumps(envelope, separators=(",", ":")).encode()[:-1]
        line = prefix + b',"crc":"%08x"}\n' % crc32c.crc32c(prefix)
        journal._call(journal._nc.jetstream().publish(subject, line))  # as a newer cairn would write it
    finally:
        journal.close()
    argv = ["log", "s", "--json", "--nats", cluster.url, "--nats-layout", name]
    code, out, err = run(argv)
    assert code == 0
    listed = json_lines(out)
    assert [x["seq"] for x in listed] == [1, 2, 3]  # type: ignore[index]
    assert listed[-1] == {  # the envelope only
        "pos": 2,
        "sid": "s",
        "seq": 3,
        "ts": 1_800_000_000_000,
        "kind": "from-a-newer-cairn",
        "unknown_kind": True,
    }
    assert len(err.splitlines()) == 1 and "does not know (from-a-newer-cairn)" in err
    code, out, _ = run(argv[:2] + argv[3:])
    assert code == 0 and "from-a-newer-cairn" in out and "(unknown kind: body not decoded)" in out
    code, out, _ = run([*argv, "--kind", "from-a-newer-cairn"])
    assert code == 0 and [x["seq"] for x in json_lines(out)] == [3]  # type: ignore[index]
    assert run([*argv, "--kind", "no-such-kind"])[0] == 2
