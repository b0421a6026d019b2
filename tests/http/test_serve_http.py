"""`cairn serve --http` as an operator runs it: a child process on a free port, stopped by SIGTERM."""

from __future__ import annotations

import concurrent.futures
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.http.helpers import sse_events

WAIT_S = 30.0


def _serve(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen[str], str, float]:
    began = time.monotonic()
    argv = [
        sys.executable,
        "-m",
        "cairn.cli",
        "serve",
        "--http",
        "127.0.0.1:0",
        "--store",
        str(tmp_path / "store"),
    ]
    proc = subprocess.Popen(
        [*argv, "--workspaces", str(tmp_path / "ws"), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        line = pool.submit(proc.stdout.readline).result(WAIT_S)  # type: ignore[union-attr]
    found = re.search(r"serving (http://127\.0\.0\.1:\d+) ", line)
    if found is None:
        proc.kill()
        raise AssertionError(f"cairn serve did not start: {line!r} {proc.communicate(timeout=10)[1][-3000:]}")
    return proc, found.group(1), time.monotonic() - began


def test_cairn_serve_http_serves_the_demo_agent_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    """It serves within seconds (the time is printed; the bench is where targets are checked), runs
    a turn of the demo's scripted agent in a workspace of its own, and on SIGTERM ends an open event
    stream, closes the store and exits 0; the log then replays (`cairn verify`)."""
    proc, url, took = _serve(tmp_path)
    print(f"cairn serve --http answered its first line after {took:.2f} s")
    try:
        with httpx.Client(base_url=url, timeout=WAIT_S) as client:
            assert client.get("/v1/health").json() == {"ok": True}
            done = client.post("/v1/sessions/demo-1/messages?wait=true", json={"text": "List the files."})
            assert done.status_code == 200 and done.json()["ok"], done.text
            assert (tmp_path / "ws" / "demo-1").is_dir()
            with client.stream("GET", "/v1/sessions/demo-1/events") as stream:
                events = sse_events(stream.iter_lines())
                assert next(events).event == "session-started"
                proc.send_signal(signal.SIGTERM)
                rest = list(events)  # the stream ends: the server closed it
            assert rest and rest[-1].event == "turn-completed"
        out, err = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert "cairn serve: stopped; the store is closed" in out and "Traceback" not in err
    verify = subprocess.run(
        [sys.executable, "-m", "cairn.cli", "verify", "--store", str(tmp_path / "store")],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--http", "nowhere"], "--http takes HOST:PORT"),
        (["--http", "127.0.0.1:0", "--nats", "nats://127.0.0.1:4222"], "with --nats it is not built yet"),
        (
            ["--workspaces", "w", "--nats", "nats://127.0.0.1:4222"],
            "--workspaces and --tenants go with --http",
        ),
    ],
)
def test_cairn_serve_http_refuses_what_it_cannot_serve_with_exit_2(
    argv: list[str], said: str, tmp_path: Path
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cairn.cli", "serve", *argv, "--store", str(tmp_path / "s")],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert not (tmp_path / "s").exists()
