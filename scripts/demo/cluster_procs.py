"""The processes of `cairn demo --cluster`: `cairn serve` hosts as children, the installed `cairn` command.

`HostProcs` starts one `cairn serve --nats URL --host-id hN` per host (the
same entry a user runs, `python -m cairn.cli serve`), waits for each to say
it serves, and SIGKILLs (`kill`) or SIGTERMs (`stop`) them; `end_all`
SIGKILLs whatever is still running and reaps it, so no host outlives the
demo, also when it fails or is interrupted. A host's output goes to
`<cluster>/hosts/<id>.log`.

`cairn_command` runs the installed `cairn` script (beside this interpreter,
else on PATH) and returns its exit status and output: what a user would type.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from cairn.demo.errors import DemoSetupError
from cairn.store.jetstream.local_cluster import die_with_parent

#: how long a host may take to connect and say it serves (imports, the layout, the lease bucket)
READY_S = 60.0


def clean_env() -> dict[str, str]:
    """The environment of the demo's children, without `$CAIRN_NATS` and `$CAIRN_NATS_LAYOUT`: they
    work on the demo's own cluster, in the standard layout, whatever the user's shell points at."""
    return {key: value for key, value in os.environ.items() if key not in ("CAIRN_NATS", "CAIRN_NATS_LAYOUT")}


@dataclass
class HostProc:
    """One `cairn serve` child: its id, process and log file."""

    host_id: str
    process: subprocess.Popen[str]
    log_path: Path
    #: the wall-clock ms of its SIGKILL, when the demo killed it
    killed_ms: int | None = None
    exit_code: int | None = None

    @property
    def pid(self) -> int:
        return self.process.pid


@dataclass
class HostProcs:
    """The demo's hosts (see the module doc)."""

    url: str
    ttl_s: int
    root: Path
    procs: dict[str, HostProc] = field(default_factory=dict)

    def start(self, host_ids: list[str]) -> None:
        """Start every host at once; return when each printed that it serves (DemoSetupError if not)."""
        (self.root / "hosts").mkdir(parents=True, exist_ok=True)
        for host_id in host_ids:
            log_path = self.root / "hosts" / f"{host_id}.log"
            argv = [sys.executable, "-m", "cairn.cli", "serve", "--nats", self.url, "--host-id", host_id]
            argv += ["--lease-ttl", str(self.ttl_s), "--grace", "5"]
            with open(log_path, "w") as log:
                process = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    text=True,
                    env={**clean_env(), "PYTHONUNBUFFERED": "1"},
                    start_new_session=True,  # a Ctrl-C reaches the demo, which ends its hosts itself
                    preexec_fn=die_with_parent,  # prctl only, no locks taken
                )
            self.procs[host_id] = HostProc(host_id, process, log_path)
        with concurrent.futures.ThreadPoolExecutor(len(host_ids)) as pool:
            lines = {hid: pool.submit(p.process.stdout.readline) for hid, p in self.procs.items()}  # type: ignore[union-attr]
            for host_id, line in lines.items():
                try:
                    said = line.result(READY_S)
                except concurrent.futures.TimeoutError:
                    said = ""
                if "serving" not in said:
                    self.end_all()
                    tail = self.procs[host_id].log_path.read_text(errors="replace")[-500:].strip()
                    raise DemoSetupError(
                        f"host {host_id} did not start: {said.strip() or tail or 'no output'}"
                    )
        for proc in self.procs.values():  # the rest of what it prints goes to its log
            _drain_to(proc)

    def kill(self, host_id: str) -> int:
        """SIGKILL the host, as a crash; returns the wall-clock ms of the signal."""
        proc = self.procs[host_id]
        proc.killed_ms = time.time_ns() // 1_000_000
        proc.process.send_signal(signal.SIGKILL)
        proc.exit_code = proc.process.wait(30)
        return proc.killed_ms

    def stop(self, host_id: str, timeout_s: float = 30.0) -> int:
        """SIGTERM the host (leases released, turns finished or marked) and wait; its exit status."""
        proc = self.procs[host_id]
        if proc.process.poll() is None:
            proc.process.send_signal(signal.SIGTERM)
            try:
                proc.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.process.kill()
                proc.process.wait()
        proc.exit_code = proc.process.returncode
        return proc.exit_code

    def alive(self) -> list[str]:
        return [hid for hid, proc in self.procs.items() if proc.process.poll() is None]

    def end_all(self) -> None:
        """SIGKILL every host still running and reap it (the demo's last resort: nothing left behind)."""
        for proc in self.procs.values():
            if proc.process.poll() is None:
                proc.process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):  # a SIGKILLed child that never ends
                proc.process.wait(30)


def _drain_to(proc: HostProc) -> None:
    """Copy the rest of the host's stdout to its log on a daemon thread (a full pipe would block it)."""
    import threading

    def copy() -> None:
        assert proc.process.stdout is not None
        with open(proc.log_path, "a") as log:
            for line in proc.process.stdout:
                log.write(line)
                log.flush()

    threading.Thread(target=copy, name=f"demo-host-log-{proc.host_id}", daemon=True).start()


def cairn_executable() -> list[str]:
    """The installed `cairn` command: beside this interpreter, else on PATH, else `python -m cairn.cli`."""
    beside = Path(sys.executable).parent / "cairn"
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside)]
    found = shutil.which("cairn")
    return [found] if found else [sys.executable, "-m", "cairn.cli"]


@dataclass(frozen=True)
class CommandRun:
    """One `cairn ...` command the demo ran: its arguments, exit status and last line of output."""

    args: list[str]
    exit_code: int
    last_line: str


def cairn_command(args: list[str], timeout_s: float = 120.0) -> CommandRun:
    """Run `cairn <args>` as a user would; the exit status and the last line it printed."""
    try:
        done = subprocess.run(
            [*cairn_executable(), *args],
            stdin=subprocess.DEVNULL,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return CommandRun(args, -1, f"no answer within {timeout_s} s")
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    return CommandRun(args, done.returncode, lines[-1] if lines else "")
