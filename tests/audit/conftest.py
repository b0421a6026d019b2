"""A store holding every event kind, forks, a blob and one corrupted session, for the export tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cairn import Host, HostConfig, demo
from cairn.actors.provider.scripted import Reply, ScriptedProvider, http_error
from cairn.actors.tools import ToolInvocation, ToolOutcome
from cairn.events.kinds import OwnerChanged
from cairn.events.model import ToolCall
from cairn.store import Journal
from tests.store.helpers import msg, started, usage

BIG = 300_000  # chars of a tool result: over the 256 KiB blob threshold
BROKEN = "broken"
#: the text of the broken session's line whose bytes the fixture alters (same length, so only the crc fails)
MARK, ALTERED = b"corrupt-me", b"CORRUPT-ME"


class BigTool:
    schemas = ('{"name":"big","parameters":{"type":"object"}}',)
    read_only = ("big",)

    def __call__(self, invocation: ToolInvocation) -> ToolOutcome:
        return ToolOutcome(content="x" * (BIG - 20) + " end of big output\n")


def build_store(root: Path) -> None:
    """The demo's sessions, plus a blob, a failed turn, two forks, an owner change, and a broken session."""
    report = demo.run(root, 5, 12, show=False, plain=False)
    assert report["ok"], report
    provider = ScriptedProvider(
        turns=(
            Reply(text="Running the big tool.", tool_calls=(ToolCall("big-1", "big", "{}"),)),
            Reply(text="It printed a lot."),
            http_error(400, "this request is malformed"),
        )
    )
    with Host.open(
        root, provider=provider, tools=BigTool(), settings=demo.SETTINGS, config=HostConfig(sweep=False)
    ) as host:
        assert host.send("extra", "run the big tool", workspace=root).result(60).ok
        failed = host.send("extra", "and again").result(60)
        assert failed.status == "failed" and failed.phase == "provider"
        host.fork("demo-1", "demo-1-fork")
        host.fork("extra", "extra-fork")
    with Journal.open(root) as journal:
        taken = OwnerChanged(host_id="host-b", lease_revision=7, previous_host="host-a")
        journal.append("extra", [taken], expected_seq=journal.last_seq("extra"))
        journal.append(BROKEN, [started(), msg(2, "fine"), msg(3, MARK.decode()), usage(4)], expected_seq=0)
        # a line after the damaged one, so it is durable corruption and not a torn tail
        journal.append("extra", [msg(99, "after")], expected_seq=journal.last_seq("extra"))
    segments = sorted((root / "log").glob("*.jsonl"))
    data = segments[-1].read_bytes()
    assert data.count(MARK) == 1
    segments[-1].write_bytes(data.replace(MARK, ALTERED))


@pytest.fixture(scope="session")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("audit") / "store"
    build_store(root)
    return root


@pytest.fixture
def store(pristine: Path, tmp_path: Path) -> Path:
    """A private copy of the store (some tests append to it)."""
    copy = tmp_path / "store"
    shutil.copytree(pristine, copy, ignore=shutil.ignore_patterns("LOCK", "*.lock"))
    return copy
