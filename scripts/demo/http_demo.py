"""`cairn demo --http`: the demo's sessions through the HTTP API, from client processes, across a crash.

    cairn demo --http [--store DIR] [--sessions 4] [--turns 6] [--json]

`run_http` does, in order:

1. a fresh store and workspaces under `DIR/http/` (an earlier run's are
   removed), and `cairn serve --http 127.0.0.1:PORT` on them as a child
   process (the demo's scripted agent; its output in `DIR/http/server.log`);
2. one client process per session (`cairn.demo.http_client`, the standard
   library's HTTP only), each sending its M turns with idempotency keys
   and reading them from the session's event stream;
3. once a third of all turns are done, the server is SIGKILLed (the turns
   then open stay open in the log) and started again on the same port;
   each client waits for it, sends its message again under the same key
   (answered from the log: a turn the crash left open ends `interrupted`
   when its session loads; nothing runs twice) and resumes its stream after
   the last id it saw;
4. the server is stopped with SIGTERM (exit 0), and the store is read.

The run is healthy (exit 0) when: every turn ended completed or marked
interrupted; every client was streamed every record of its session a
client may see, once, in the log's order, across the crash (no gap, no
repeat); every session loads to the state a replay from its first event
gives; the server was killed mid-run and the clients reconnected; and the
server's last stop was clean. Else 1, listing what failed; 2 when it could
not run.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from cairn import _console
from cairn.actors.session.handoff import is_hidden_event
from cairn.demo.errors import DemoSetupError
from cairn.demo.workspace import make_workspace
from cairn.store import Journal

DEFAULT_SESSIONS, DEFAULT_TURNS = 4, 6
WAIT_S = 300.0


class Server:
    """`cairn serve --http` as a child process on `root/store` and `root/workspaces`, its stderr appended
    to `root/server.log`; port 0 takes a free one, which a restart keeps (`url`, once started)."""

    def __init__(self, root: Path, port: int = 0, *, cluster: tuple[str, ...] = ()) -> None:
        self.root, self.port = root, port
        #: `cairn serve`'s options of a cluster (`--nats URL`, ...) to serve instead of `root/store`
        self.cluster = cluster
        self.url = ""
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        argv = [sys.executable, "-m", "cairn.cli", "serve", "--http", f"127.0.0.1:{self.port}"]
        argv += list(self.cluster) or ["--store", str(self.root / "store")]
        argv += ["--workspaces", str(self.root / "workspaces")]
        self.root.mkdir(parents=True, exist_ok=True)
        log = open(self.root / "server.log", "a", encoding="utf-8")  # noqa: SIM115 (the child keeps it)
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=log, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )
        log.close()
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        found = re.search(r"serving (http://127\.0\.0\.1:(\d+)) ", line)
        if found is None:
            self.proc.kill()
            where = self.root / "server.log"
            raise DemoSetupError(f"cairn serve --http did not start (see {where}): {line!r}")
        self.url, self.port = found.group(1), int(found.group(2))

    def signal(self, sig: signal.Signals) -> int:
        """Send `sig` and reap the process; its exit status."""
        assert self.proc is not None
        self.proc.send_signal(sig)
        return self.proc.wait(WAIT_S)

    def end(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(WAIT_S)


class Clients:
    """The client processes, and the turns they reported done (`turn N done` on their stdout)."""

    def __init__(self, url: str, root: Path, sids: list[str], turns: int) -> None:
        self.done = dict.fromkeys(sids, 0)
        self.changed = threading.Condition()
        self.procs: dict[str, subprocess.Popen[str]] = {}
        for sid in sids:
            argv = [
                sys.executable,
                "-m",
                "cairn.demo.http_client",
                url,
                sid,
                str(turns),
                str(root / f"{sid}.json"),
            ]
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.procs[sid] = proc
            threading.Thread(target=self._follow, args=(sid, proc), daemon=True).start()

    def _follow(self, sid: str, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("turn ") and line.rstrip().endswith(" done"):
                with self.changed:
                    self.done[sid] += 1
                    self.changed.notify_all()

    def wait_for(self, total: int) -> bool:
        """Whether `total` turns were done, in all, within the wait."""
        with self.changed:
            return self.changed.wait_for(lambda: sum(self.done.values()) >= total, WAIT_S)

    def finish(self) -> dict[str, tuple[int, str]]:
        """Each client's exit status and the end of its stderr, once it ended."""
        ended = {}
        for sid, proc in self.procs.items():
            try:
                proc.wait(WAIT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            err = proc.stderr.read() if proc.stderr is not None else ""
            ended[sid] = (proc.returncode, err[-500:])
        return ended

    def end(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()


def _facts(store: Path, seen: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per session, from the log: the records a client may see, and whether loading equals a replay."""
    facts = {}
    with Journal.open(store, readonly=True) as journal:
        for sid, client in seen.items():
            visible = [[str(r.seq), r.kind] for r in journal.read(sid) if not is_hidden_event(r.event)]
            facts[sid] = {
                "log_records": len(visible),
                "stream_matches_log": client["records"] == visible,
                "replay_identical": journal.load(sid) == journal.replay_full(sid),
            }
    return facts


class _Run:
    """What the run did, before it is judged: the server's two exits, the clients' exits and reports."""

    def __init__(self) -> None:
        self.killed = self.stopped = 0
        self.done_at_kill = 0
        self.seconds = 0.0
        self.ended: dict[str, tuple[int, str]] = {}


def _drive(root: Path, sids: list[str], turns: int) -> _Run:
    """Steps 1-4 of the module doc."""
    run = _Run()
    server = Server(root)
    clients: Clients | None = None
    try:
        server.start()
        began = time.monotonic()
        clients = Clients(server.url, root / "clients", sids, turns)
        killed_after = max(1, len(sids) * turns // 3)
        if not clients.wait_for(killed_after):
            raise DemoSetupError(f"the clients did not finish {killed_after} turns within {WAIT_S:g} s")
        run.killed = server.signal(signal.SIGKILL)
        run.done_at_kill = sum(clients.done.values())
        server.start()
        run.ended = clients.finish()
        run.stopped = server.signal(signal.SIGTERM)
        run.seconds = time.monotonic() - began
    finally:
        if clients is not None:
            clients.end()
        server.end()
    return run


def _judged(run: _Run, seen: dict[str, dict[str, Any]], facts: dict[str, dict[str, Any]]) -> list[str]:
    """The problems of a run (none: healthy), and each turn's outcome counted into `outcomes`."""
    problems = [
        f"client {sid} exited {code}: {err.strip()}" for sid, (code, err) in run.ended.items() if code
    ]
    for sid, client in seen.items():
        for end in client["turns"]:
            if end["status"] != "completed" and end.get("phase") != "interrupted":
                problems.append(f"{sid} turn {end['turn']}: {end['status']} ({end.get('phase')})")
        if not facts[sid]["stream_matches_log"]:
            problems.append(f"{sid}: what the client was streamed differs from the log (a gap or a repeat)")
        if not facts[sid]["replay_identical"]:
            problems.append(f"{sid}: loading does not equal a replay from the first event")
    if run.killed != -signal.SIGKILL:
        problems.append(f"the server was not killed by SIGKILL (exit {run.killed})")
    if not any(client["reconnects"] for client in seen.values()):
        problems.append("no client had to reconnect: the crash was not mid-run")
    if run.stopped != 0:
        problems.append(f"the server's SIGTERM stop exited {run.stopped}, not 0")
    if len(seen) != len(run.ended):
        problems.append(f"{len(run.ended) - len(seen)} clients wrote no report")
    return problems


def _outcomes(seen: dict[str, dict[str, Any]]) -> dict[str, int]:
    outcomes = {"completed": 0, "interrupted": 0, "other": 0}
    for client in seen.values():
        for end in client["turns"]:
            if end["status"] == "completed":
                outcomes["completed"] += 1
            else:
                outcomes["interrupted" if end.get("phase") == "interrupted" else "other"] += 1
    return outcomes


def run_http(store: Path, sessions: int, turns: int) -> dict[str, Any]:
    """The run of the module doc; its report (a JSON-able dict with `ok` and `problems`)."""
    root = store / "http"
    shutil.rmtree(root, ignore_errors=True)
    (root / "clients").mkdir(parents=True)
    sids = [f"demo-{n}" for n in range(1, sessions + 1)]
    for n, sid in enumerate(sids, start=1):
        make_workspace(root / "workspaces" / sid, n)
    run = _drive(root, sids, turns)
    seen = {}
    for sid in sids:
        path = root / "clients" / f"{sid}.json"
        if path.exists():
            seen[sid] = json.loads(path.read_text(encoding="utf-8"))
    facts = _facts(root / "store", seen)
    problems = _judged(run, seen, facts)
    store_dir = shlex.quote(str(root / "store"))
    cairn = _console.cairn_program()  # the commands run as printed
    return {
        "ok": not problems,
        "problems": problems,
        "sessions": sessions,
        "turns": turns,
        "seconds": round(run.seconds, 1),
        "turns_done_at_kill": run.done_at_kill,
        "outcomes": _outcomes(seen),
        "reconnects": sum(client["reconnects"] for client in seen.values()),
        "server_exit_on_sigterm": run.stopped,
        "facts": facts,
        "root": str(root),
        "audit_commands": [
            f"{cairn} sessions --store {store_dir}",
            f"{cairn} interrupted --store {store_dir}",
            f"{cairn} log {sids[0]} --store {store_dir} --kind turn-failed --kind turn-completed",
            f"{cairn} verify --store {store_dir}",
        ],
    }


def render_http(report: dict[str, Any]) -> None:
    """The report as text."""
    out, n = report["outcomes"], report["sessions"]
    print(
        f"{n} sessions x {report['turns']} turns through the HTTP API in {report['seconds']} s, from {n} "
        f"client processes; the server SIGKILLed after {report['turns_done_at_kill']} turns and started "
        f"again; {report['reconnects']} reconnects."
    )
    print(
        f"Turns: {out['completed']} completed, {out['interrupted']} marked interrupted by the crash, "
        f"{out['other']} otherwise."
    )
    for sid, facts in report["facts"].items():
        stream = "no gap, no repeat" if facts["stream_matches_log"] else "DIFFERS from the log"
        replay = "identical" if facts["replay_identical"] else "DIFFERS"
        print(f"  {sid}: {facts['log_records']} records streamed, {stream}; replay {replay}")
    print(f"The server stopped on SIGTERM with exit {report['server_exit_on_sigterm']}.")
    print("The run is healthy." if report["ok"] else "The run is NOT healthy:")
    for problem in report["problems"]:
        print(f"  - {problem}")
    print("\nAudit what happened:")
    for command in report["audit_commands"]:
        print(f"  {command}")


def main_http(store: str, sessions: int | None, turns: int | None, *, as_json: bool) -> int:
    """`cairn demo --http`: run, print, exit 0/1/2 (the module doc)."""
    try:
        report = run_http(Path(store), sessions or DEFAULT_SESSIONS, turns or DEFAULT_TURNS)
    except (DemoSetupError, OSError) as error:
        print(f"cairn demo: {error}", file=sys.stderr)
        return 2
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        with contextlib.suppress(BrokenPipeError):
            render_http(report)
    return 0 if report["ok"] else 1
