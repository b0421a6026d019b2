"""The registry's counters (slots held, idle sessions in LRU order) stay right through every change.

They are kept up to date on each change instead of being found by a scan
(issue 13: a spawn scanned every entry twice), so each test compares them
with a recount of the entries: after spawns, LRU and idle passivation, a
crashed actor and its rebuild, an eviction, a stop mid-turn and the host's
close, and along a seeded random walk of all of those.
"""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pykka

from cairn import Host
from cairn.actors.host import actor_index
from cairn.actors.host.registry import HostedSession, Registry
from cairn.store import Journal
from tests.actors.helpers import WAIT, Clock, GatedTools, Seed, kinds, open_host, scripted


def recount(registry: Registry) -> tuple[int, list[str]]:
    """(slots held, idle sessions) found the slow way, by a scan of every entry."""
    with registry._cond:
        slots = sum(1 for e in registry._entries.values() if e.state != "stopping")
        idle = [sid for sid, e in registry._entries.items() if e.state == "live" and e.busy == 0]
        return slots, idle


def check(host: Host) -> tuple[int, list[str]]:
    """The counters equal the recount; returns (slots held, idle sessions in LRU order)."""
    registry = host._registry
    slots, idle = recount(registry)
    with registry._cond:
        kept = list(registry._idle)
    assert registry.counts == (slots, len(idle))
    assert sorted(kept) == sorted(idle)
    return slots, kept


def test_counts_follow_spawns_lru_and_idle_passivation_and_close(tmp_path: Path) -> None:
    clock = Clock()
    host = open_host(tmp_path / "store", scripted(), clock=clock, max_live_sessions=2, idle_timeout_s=60)
    assert check(host) == (0, [])
    for sid in ("a", "b"):
        host.state(sid)
        clock.advance(1_000)
    assert check(host) == (2, ["a", "b"])
    host.state("c")  # the cap is full: a, idle longest, is passivated
    assert check(host) == (2, ["b", "c"]) and host.stats.passivated_lru == 1
    clock.advance(10_000)
    host.state("b")  # b is used again: c is now the idle one longest
    assert check(host) == (2, ["c", "b"])
    clock.advance(55_000)
    assert host.passivate_idle() == 1  # c, idle 65 s; b only 55 s: the sweep stops there
    assert check(host) == (1, ["b"]) and host.live_sessions == ["b"]
    assert host.stats.peak_live == 2 and host.stats.spawned == 3
    host.close()
    assert check(host) == (0, [])


def test_a_busy_session_is_never_the_lru_victim_nor_counted_idle(tmp_path: Path) -> None:
    tools = GatedTools()
    host = open_host(tmp_path / "store", scripted(), tools=tools, max_live_sessions=2)
    try:
        turn = host.send("a", "work: tools 1 x 5 #a", workspace=tmp_path)
        assert tools.entered.wait(WAIT)
        host.state("b")
        assert check(host) == (2, ["b"])  # a holds its slot, busy
        host.state("c")  # b is passivated, not the busy a
        assert check(host) == (2, ["c"]) and host.live_sessions == ["a", "c"]
        tools.release.set()
        assert turn.result(WAIT).ok
        host.state("a")
        assert check(host) == (2, ["c", "a"])
    finally:
        tools.release.set()
        host.close()
    assert check(host) == (0, [])


def test_counts_follow_a_dead_actor_and_its_rebuild_by_replay(tmp_path: Path) -> None:
    host = open_host(tmp_path / "store", scripted(), max_live_sessions=3)
    for sid in ("a", "b"):
        Seed(host.journal, sid, str(tmp_path)).turn(tools=[20])
    before = host.state("a")
    host.state("b")
    ref = host._registry._entries["a"].ref
    assert ref is not None
    ref.stop(block=True)  # the actor dies behind the registry's back, as a crash would leave it
    assert check(host) == (2, ["a", "b"])  # still holding its slot until the next message finds it dead
    assert host.state("a") == before  # rebuilt by replay
    assert host.stats.rebuilt_after_crash == 1
    assert check(host) == (2, ["b", "a"])
    host.close()
    assert check(host) == (0, [])


def test_counts_follow_a_stop_mid_turn_and_an_eviction_for_a_fork(tmp_path: Path) -> None:
    tools = GatedTools()
    host = open_host(tmp_path / "store", scripted(), tools=tools)
    try:
        turn = host.send("s", "work: tools 2 x 5 #c", workspace=tmp_path)
        assert tools.entered.wait(WAIT)
        host.state("t")  # a live, idle session with no log yet: a fork onto it evicts it first
        assert check(host) == (2, ["t"])
        stopper = threading.Thread(target=host.stop_session, args=("s",))
        stopper.start()
        tools.release.set()
        stopper.join(WAIT)
        assert turn.result(WAIT).phase == "interrupted"
        assert check(host) == (1, ["t"])
        host.fork("s", "t")
        assert check(host) == (0, []) and host.live_sessions == []
        host.state("t")
        assert check(host) == (1, ["t"])
    finally:
        tools.release.set()
        host.close()
    assert check(host) == (0, [])


def test_property_counts_stay_right_along_a_random_walk_of_every_change(tmp_path: Path) -> None:
    rng = random.Random(13)
    clock = Clock()
    host = open_host(tmp_path / "store", scripted(), clock=clock, max_live_sessions=3, idle_timeout_s=5)
    sids = [f"s{n}" for n in range(6)]
    seen = {"touch": 0, "sweep": 0, "stop": 0, "kill": 0}
    try:
        for _ in range(300):
            op = rng.choice(["touch", "touch", "touch", "sweep", "stop", "kill"])
            sid = rng.choice(sids)
            clock.advance(rng.randrange(0, 3_000))
            if op == "touch":
                host.state(sid)
            elif op == "sweep":
                host.passivate_idle()
            elif op == "stop":
                host.stop_session(sid)
            else:
                entry = host._registry._entries.get(sid)
                if entry is not None and entry.ref is not None:
                    entry.ref.stop(block=True)
            seen[op] += 1
            slots, idle = check(host)
            assert slots <= 3 and len(idle) == slots  # nothing is busy between calls
            assert set(host.live_sessions) == set(idle)
    finally:
        host.close()
    assert check(host) == (0, [])
    assert seen == {"touch": 149, "sweep": 49, "stop": 63, "kill": 39}
    stats = host.stats
    assert (stats.spawned, stats.passivated_lru, stats.passivated_idle) == (103, 38, 37)
    assert (stats.rebuilt_after_crash, stats.peak_live) == (2, 3)


# --- pykka's registry, made O(1) (actor_index) ------------------------------------------------


class Echo(pykka.ThreadingActor):
    def on_receive(self, message: object) -> object:
        return message


def test_ordered_refs_answers_as_the_list_it_replaces() -> None:
    refs = actor_index.OrderedRefs(["x", "y"])
    refs.append("z")
    assert list(refs) == ["x", "y", "z"] and refs[:] == ["x", "y", "z"] and refs[-1] == "z"
    assert "y" in refs and len(refs) == 3
    refs.remove("y")
    assert refs[:] == ["x", "z"] and "y" not in refs
    try:
        refs.remove("y")
    except ValueError:
        pass
    else:
        raise AssertionError("removing what is not there raises ValueError, as list.remove does")


def test_pykka_registry_keeps_its_answers_once_a_host_makes_it_o1(tmp_path: Path) -> None:
    first = Echo.start()  # started before the swap: carried over
    host = open_host(tmp_path / "store", scripted())
    try:
        assert isinstance(pykka.ActorRegistry._actor_refs, actor_index.OrderedRefs)
        assert actor_index.install() is True  # once per process
        second = Echo.start()
        mine = [ref for ref in pykka.ActorRegistry.get_all() if ref in (first, second)]
        assert mine == [first, second]  # start order
        assert pykka.ActorRegistry.get_by_urn(second.actor_urn) is second
        assert set(pykka.ActorRegistry.get_by_class(Echo)) >= {first, second}
        assert second.ask("ping", timeout=WAIT) == "ping"
        first.stop(block=True)
        assert first not in pykka.ActorRegistry.get_all()
        pykka.ActorRegistry.unregister(first)  # not registered any more: no error, as before
        second.stop(block=True)
        assert not [ref for ref in pykka.ActorRegistry.get_all() if ref in (first, second)]
    finally:
        host.close()


# --- hosted sessions on daemon threads, still stopped (on_stop) at exit -----------------------


def test_hosted_sessions_run_on_daemon_threads(tmp_path: Path) -> None:
    assert HostedSession.use_daemon_thread is True  # CPython: the exit hook exists
    host = open_host(tmp_path / "store", scripted())
    try:
        host.state("s")
        ref = host._registry._entries["s"].ref
        assert ref is not None
        named = [t for t in threading.enumerate() if t.name.startswith("HostedSession")]
        assert named and all(t.daemon for t in named)
    finally:
        host.close()


def test_a_turn_running_at_exit_is_still_recorded_interrupted_by_the_exit_hook(tmp_path: Path) -> None:
    """Daemon session threads would die silently at exit; the exit hook stops them first (on_stop runs)."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    store = tmp_path / "store"
    script = textwrap.dedent(f"""
        import threading
        from tests.actors.helpers import GatedTools, open_host, scripted
        tools = GatedTools()
        host = open_host({str(store)!r}, scripted(), tools=tools)
        turn = host.send("s", "work: tools 2 x 5 #c", workspace={str(workspace)!r})
        assert tools.entered.wait(30)
        # registered after the host's hook, so it runs first: the tool returns, then the host closes
        threading._register_atexit(tools.release.set)
        print("leaving with the turn running", flush=True)
    """)
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "leaving" in done.stdout
    journal = Journal.open(store)  # read the log as the exit left it: no session is loaded
    try:
        assert kinds(journal, "s")[-1] == "turn-failed"
        failed = list(journal.read("s"))[-1].event
        assert failed.phase == "interrupted"  # type: ignore[union-attr]
    finally:
        journal.close()
