"""Tools with bounds (issue 23 point 6): a call that hangs ends in an error result after the host's
`tool_timeout_s` and the turn goes on; hung calls cost at most the host's `tool_threads` threads,
never one per call; a result longer than `max_tool_output_chars` is stored cut, saying so, and
None stores it whole (in a blob). Real hosts on the scripted provider, real threads."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from cairn import HostConfig, InputError
from cairn.actors.provider.scripted import Reply
from cairn.actors.session.tool_budget import PREVIEW_CHARS
from cairn.actors.tool_runner import TimedOut, ToolRunner
from cairn.actors.tools import ToolInvocation, ToolOutcome
from cairn.events.kinds import ToolResult
from cairn.events.model import BlobPart, Part, TextPart, ToolCall
from tests.actors.helpers import WAIT, open_host, reopen_and_compare, scripted


class Hangs:
    """A tool executor whose calls wait until `release` is set (or 60 s); counts the calls begun."""

    schemas = ('{"name":"slow","parameters":{"type":"object"}}',)
    read_only = ("slow",)

    def __init__(self) -> None:
        self.release = threading.Event()
        self.begun = 0
        self._lock = threading.Lock()

    def __call__(self, invocation: ToolInvocation) -> ToolOutcome:
        with self._lock:
            self.begun += 1
        self.release.wait(60)
        return ToolOutcome(content="finally")


class Returns:
    """A tool executor that returns `text` for every call."""

    schemas = ('{"name":"dump","parameters":{"type":"object"}}',)
    read_only = ("dump",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __call__(self, invocation: ToolInvocation) -> ToolOutcome:
        return ToolOutcome(content=self.text)


def _text(content: str | tuple[Part, ...]) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.text for part in content if isinstance(part, TextPart))


def _results(host: Any, sid: str) -> list[ToolResult]:
    return [r.event for r in host.journal.read(sid, 1) if isinstance(r.event, ToolResult)]


# --- the runner --------------------------------------------------------------------------


def test_the_runner_returns_values_and_raises_exceptions_on_the_callers_thread() -> None:
    runner = ToolRunner(threads=2, timeout_s=10)
    try:
        assert runner.run(lambda: 41 + 1) == 42
        with pytest.raises(ValueError, match="bad"):
            runner.run(lambda: (_ for _ in ()).throw(ValueError("bad")))
        assert runner.live_threads == 1  # one thread did both, one after the other
    finally:
        runner.close()


def test_hung_calls_cost_at_most_the_runners_threads_and_a_call_that_never_started_never_runs() -> None:
    """Two threads, five calls that hang: the first two time out running (`started`), the other
    three time out waiting and never run, and no third thread is made. Released, the two threads
    take new calls again."""
    release = threading.Event()
    begun: list[int] = []
    runner = ToolRunner(threads=2, timeout_s=10)

    def hang(n: int) -> str:
        begun.append(n)
        release.wait(60)
        return f"late {n}"

    try:
        outcomes = [runner.run(lambda n=n: hang(n), timeout_s=0.2) for n in range(5)]
        assert outcomes[:2] == [TimedOut(0.2, started=True, hung=1), TimedOut(0.2, started=True, hung=2)]
        assert outcomes[2:] == [TimedOut(0.2, started=False, hung=2)] * 3
        assert begun == [0, 1] and runner.live_threads == 2 and runner.hung == 2
        release.set()
        assert runner.run(lambda: "fresh") == "fresh"
        assert begun == [0, 1] and runner.live_threads == 2
    finally:
        release.set()
        runner.close()


def test_closing_the_runner_stops_its_idle_threads() -> None:
    """Three callers at once get three threads; close stops all three."""
    runner = ToolRunner(threads=3, timeout_s=10, name="cairn-tool-close-test")
    together = threading.Barrier(3)
    callers = [threading.Thread(target=runner.run, args=(lambda: together.wait(10),)) for _ in range(3)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(10)
    threads = [t for t in threading.enumerate() if t.name.startswith("cairn-tool-close-test")]
    assert len(threads) == 3 == runner.live_threads
    runner.close()
    for thread in threads:
        thread.join(10)
        assert not thread.is_alive()
    assert runner.live_threads == 0


# --- in a host -----------------------------------------------------------------------------


def test_a_hung_tool_gives_the_model_an_error_after_tool_timeout_s_and_the_turn_goes_on(
    tmp_path: Path,
) -> None:
    tools = Hangs()
    provider = scripted(Reply(text="", tool_calls=(ToolCall("c1", "slow", "{}"),)), Reply(text="it hung"))
    host = open_host(tmp_path / "store", provider, tools=tools, tool_timeout_s=0.3)
    try:
        result = host.send("s", "run it", workspace=tmp_path).result(WAIT)
        assert result.ok and result.text == "it hung" and result.requests == 2, result
        [stored] = _results(host, "s")
        said = (
            "the tool 'slow' did not finish within 0.3 s (the host's tool_timeout_s); it may still be"
            " running, and whatever it returns is discarded"
        )
        assert (stored.status, _text(stored.content)) == ("error", said)
        assert _text(provider.requests[-1].messages[-1].content) == said
        assert tools.begun == 1
    finally:
        tools.release.set()
        host.close()


def test_hung_tools_across_turns_hold_at_most_tool_threads_threads(tmp_path: Path) -> None:
    """One tool thread and three turns whose tool hangs: the first call times out running, the
    next two time out waiting for the thread and never run. Each turn completes."""
    tools = Hangs()
    calls = [Reply(text="", tool_calls=(ToolCall(f"c{n}", "slow", "{}"),)) for n in range(3)]
    replies = [r for call in calls for r in (call, Reply(text="next"))]
    provider = scripted(*replies)
    host = open_host(tmp_path / "store", provider, tools=tools, tool_timeout_s=0.2, tool_threads=1)
    before = {t for t in threading.enumerate() if t.name.startswith("cairn-tool")}
    try:
        for _ in range(3):
            assert host.send("s", "again", workspace=tmp_path).result(WAIT).ok
        texts = [_text(r.content) for r in _results(host, "s")]
        assert texts[0].startswith("the tool 'slow' did not finish within 0.2 s")
        assert (
            texts[1:]
            == [
                "the tool 'slow' did not start within 0.2 s: every tool thread is busy (1 calls still running"
                " past their timeout); it was not run"
            ]
            * 2
        )
        assert tools.begun == 1
        new = {t for t in threading.enumerate() if t.name.startswith("cairn-tool")} - before
        assert len(new) == 1
    finally:
        tools.release.set()
        host.close()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("tool_timeout_s", 0),
        ("tool_timeout_s", float("inf")),
        ("tool_timeout_s", float("nan")),
        ("tool_threads", 0),
        ("max_tool_output_chars", 0),
    ],
)
def test_tool_bounds_out_of_range_are_refused(field: str, value: object) -> None:
    with pytest.raises(InputError, match=field):
        HostConfig(**{field: value})  # type: ignore[arg-type]


def test_a_result_over_max_tool_output_chars_is_stored_cut_saying_so(tmp_path: Path) -> None:
    """Five million chars returned, a million kept (the default): the first and last 500,000 after a
    line that says so; `original_chars` is what the tool returned; the model's preview starts with
    that line; replay gives the same state and request."""
    returned = "h" * 2_500_000 + "t" * 2_500_000
    provider = scripted(Reply(text="", tool_calls=(ToolCall("c1", "dump", "{}"),)), Reply(text="big"))
    root = tmp_path / "store"
    host = open_host(root, provider, tools=Returns(returned))
    try:
        assert HostConfig().max_tool_output_chars == 1_000_000
        assert host.send("s", "dump it", workspace=tmp_path).result(WAIT).ok
        [stored] = _results(host, "s")
        assert stored.original_chars == 5_000_000 and stored.truncated
        notice = (
            "[cairn kept 1,000,000 of the 5,000,000 chars this tool returned (the host's"
            " max_tool_output_chars): the first 500,000 and the last 500,000; the rest is not stored]\n"
        )
        assert _stored_text(host, stored) == notice + "h" * 500_000 + " [...] " + "t" * 500_000
        seen = _text(provider.requests[-1].messages[-1].content)
        assert seen.startswith(notice) and seen.count("h") <= PREVIEW_CHARS
        host = reopen_and_compare(host, root, ["s"])
    finally:
        host.close()


def test_max_tool_output_chars_none_stores_the_whole_result_in_a_blob(tmp_path: Path) -> None:
    returned = "z" * 3_000_000
    provider = scripted(Reply(text="", tool_calls=(ToolCall("c1", "dump", "{}"),)), Reply(text="big"))
    host = open_host(tmp_path / "store", provider, tools=Returns(returned), max_tool_output_chars=None)
    try:
        assert host.send("s", "dump it", workspace=tmp_path).result(WAIT).ok
        [stored] = _results(host, "s")
        assert stored.original_chars == 3_000_000
        assert isinstance(stored.content, tuple) and any(isinstance(p, BlobPart) for p in stored.content)
        assert _stored_text(host, stored) == returned
    finally:
        host.close()


def _stored_text(host: Any, stored: ToolResult) -> str:
    """The whole text a tool result keeps: inline parts and the blobs' bytes."""
    if isinstance(stored.content, str):
        return stored.content
    out = []
    for part in stored.content:
        if isinstance(part, TextPart):
            out.append(part.text)
        elif isinstance(part, BlobPart):
            out.append(host.journal.read_blob(part.sha256).decode())
    return "".join(out)
