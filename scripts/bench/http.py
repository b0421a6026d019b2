"""The HTTP API's cost: a turn through HTTP and SSE against the same turn in process, and 1,000 event
streams open at once on one server.

Usage: python -m cairn.bench.http [--quick] [--json]

- **turn overhead**: asyncloop's scripted turn through an `AsyncHost` in
  this process, and through the API served by uvicorn in a child process
  (this module with `--serve`), read as a host would: the session's event
  stream held open, each message posted and read there to its
  `turn-completed`. The client is raw HTTP/1.1 on two kept-alive sockets
  (httpx adds ~0.4 ms a request). The two alternate run by run, a run's
  figure its median turn. Judged: the median over the pairs of (HTTP - in
  process), at most 2 ms.
- **1,000 streams**: `cairn serve --http` with the demo's agent; 20 event
  streams open on each of 50 sessions, then one turn on every session, all
  at once (the burst, `--explore`: one event loop writes every stream's
  bytes), then at seeded random times within 5 s. Judged: the server's RSS
  per open stream at most 64 KiB; the time from a record's append (its
  `ts`) to its arrival at a client, p99 over the spread run, at most 50 ms.

`--quick`: 20 turns per run, 3 pairs; full: 50 turns, 7 pairs.
"""

from __future__ import annotations

import asyncio
import bisect
import gc
import itertools
import json
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cairn import AsyncHost, ToolOutcome
from cairn.bench._figure import Figure, unavailable
from cairn.bench._measure import LoadMeter, interleave, proc_status_kib
from cairn.bench.asyncloop import provider

#: (turns, rounds) by `quick`
SHAPES = {False: (50, 7), True: (20, 3)}
STREAMS, SESSIONS = 1_000, 50
ADDED_P50_MS = 2.0
STREAM_KIB = 64.0
LATENCY_P99_MS = 50.0
WAIT_S = 60.0
SPREAD_S = 5.0
SPREAD_SEED = 25


def read_tool(invocation: Any) -> ToolOutcome:
    return ToolOutcome(content="nothing to see here", effect="read")


async def _serve(store: Path, workspaces: Path) -> None:
    """The API server of the turn overhead (`--serve STORE WORKSPACES`): prints `serving URL`."""
    from cairn.actors.http.app import HttpConfig
    from cairn.actors.http.serve import HttpServer, bind_socket

    host = await AsyncHost.open(store, provider=provider(), tools=read_tool)
    server = HttpServer(host, HttpConfig(workspaces=workspaces), bind_socket("127.0.0.1:0"), grace=1)
    print(f"serving {server.address}", flush=True)
    await server.serve()


class TurnRuns:
    """The two measures of the turn overhead: each returns its run's median turn, in ms."""

    def __init__(self, root: Path, turns: int) -> None:
        self.turns = turns
        self.root = root
        (root / "ws").mkdir()
        argv = [sys.executable, "-m", "cairn.bench.http", "--serve", str(root / "served"), str(root / "ws")]
        self.child = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        line = self.child.stdout.readline() if self.child.stdout is not None else ""
        if not line.startswith("serving http://"):
            self.child.kill()
            raise RuntimeError(f"the API server did not start: {line!r}")
        self.port = int(line.split()[1].rsplit(":", 1)[1])
        self.loop = asyncio.new_event_loop()
        self.host = self.loop.run_until_complete(
            AsyncHost.open(root / "local", provider=provider(), tools=read_tool)
        )
        self.loop.run_until_complete(
            self._request("POST", "/v1/sessions/s/messages?wait=true", b'{"text": "hello"}')
        )

    def in_process(self) -> float:
        async def run() -> list[float]:
            times = []
            for _ in range(self.turns):
                began = time.perf_counter()
                turn = await self.host.send("s", "have a look at src/app.py", workspace=self.root / "ws")
                async for _item in turn.events():
                    pass
                if not (await turn.result()).ok:
                    raise RuntimeError("an in-process turn failed")
                times.append(time.perf_counter() - began)
            return times

        return statistics.median(self.loop.run_until_complete(run())) * 1000

    async def _request(self, method: str, path: str, body: bytes = b"") -> Any:
        """An untimed request on a connection of its own: its answer (200), parsed."""
        poster = await _Poster.open(self.port)
        try:
            return json.loads(await poster.request(method, path, body, expect=200))
        finally:
            poster.close()

    def via_http(self) -> float:
        async def run() -> list[float]:
            last = (await self._request("GET", "/v1/sessions/s"))["last_seq"]
            times = []
            stream = await _Stream.open(self.port, "s", last)
            poster = await _Poster.open(self.port)
            try:
                for turn in range(1, self.turns + 1):
                    began = time.perf_counter()
                    await poster.request(
                        "POST", "/v1/sessions/s/messages", b'{"text": "have a look"}', expect=202
                    )
                    await stream.until_completed(turn)
                    times.append(time.perf_counter() - began)
                    stream.received.clear()
            finally:
                stream.close()
                poster.close()
            return times

        return statistics.median(self.loop.run_until_complete(run())) * 1000

    def close(self) -> None:
        self.loop.run_until_complete(self.host.close())
        self.loop.close()
        self.child.terminate()
        self.child.wait(WAIT_S)


def turn_overhead(turns: int, rounds: int) -> Figure:
    root = Path(tempfile.mkdtemp(prefix="cairn-bench-http-"))
    runs = TurnRuns(root, turns)
    try:
        runs.in_process(), runs.via_http()  # warm-up: imports, the first spawn, the connection
        with LoadMeter() as load:
            values = interleave([("in_process", runs.in_process), ("http", runs.via_http)], rounds)
    finally:
        runs.close()
        shutil.rmtree(root, ignore_errors=True)
    added = [h - p for h, p in zip(values["http"], values["in_process"], strict=True)]
    median = statistics.median(added)
    local, http = statistics.median(values["in_process"]), statistics.median(values["http"])
    detail = (
        f"a turn's median, HTTP+SSE less in process, in {rounds} alternating pairs of {turns} turns: "
        f"{', '.join(f'{a:.2f}' for a in added)} ms (in process {local:.2f} ms, HTTP {http:.2f} ms)"
    )
    return Figure.measured(
        "http.turn_added_p50_ms",
        round(median, 2),
        "ms",
        detail,
        load,
        target=f"<= {ADDED_P50_MS:g} ms",
        met=median <= ADDED_P50_MS,
    )


class _Stream(asyncio.Protocol):
    """One SSE connection read by callbacks: each piece kept with its arrival time (`received`, parsed
    after the run by `latencies`), the turns it saw end counted. No coroutine runs per read, so one
    loop keeps up with a thousand and a late stamp is the server's lateness, not the reader's."""

    MARK = b"event: turn-completed"
    transport: asyncio.Transport  # set by `open`

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.head: asyncio.Future[bytes] = loop.create_future()
        self.received: list[tuple[float, bytes]] = []
        self.completed = 0
        self._waiter: asyncio.Future[None] | None = None
        self._pending = b""  # the response head, until it is whole
        self._tail = b""  # the last bytes, for a mark split between two reads

    @classmethod
    async def open(cls, port: int, sid: str, after: int) -> _Stream:
        loop = asyncio.get_running_loop()
        transport, stream = await loop.create_connection(cls, "127.0.0.1", port)
        stream.transport = transport
        transport.write(
            f"GET /v1/sessions/{sid}/events?after={after} HTTP/1.1\r\nHost: bench\r\n\r\n".encode()
        )
        head = await stream.head
        if not head.startswith(b"HTTP/1.1 200"):
            transport.close()
            raise RuntimeError(f"stream of {sid}: {head[:60]!r}")
        return stream

    def data_received(self, data: bytes) -> None:
        arrived_ms = time.time() * 1000
        if not self.head.done():
            self._pending += data
            head, found, data = self._pending.partition(b"\r\n\r\n")
            if not found:
                return
            self.head.set_result(head)
        self.received.append((arrived_ms, data))
        joined = self._tail + data
        self._tail = joined[-(len(self.MARK) - 1) :]
        seen = joined.count(self.MARK)
        if seen:
            self.completed += seen
            if self._waiter is not None and not self._waiter.done():
                self._waiter.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        lost = ConnectionError(f"the event stream closed: {exc}")
        for future in (self.head, self._waiter):
            if future is not None and not future.done():
                future.set_exception(lost)

    async def until_completed(self, count: int) -> None:
        """Return once `count` turns were seen to end on this stream since it opened."""
        while self.completed < count:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter

    def close(self) -> None:
        self.transport.close()


@dataclass
class _Poster:
    """Requests with a JSON body on one kept-alive connection, each answer read to its end."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    @classmethod
    async def open(cls, port: int) -> _Poster:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def request(self, method: str, path: str, body: bytes, *, expect: int) -> bytes:
        """Send `body` to `path`; the answer's body (`RuntimeError` unless its status is `expect`)."""
        head = f"{method} {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n".encode()
        self.writer.write(head + b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        head = await self.reader.readuntil(b"\r\n\r\n")
        found = re.search(rb"\r\ncontent-length: *(\d+)", head, flags=re.I)
        answer = await self.reader.readexactly(int(found.group(1))) if found else b""
        if not head.startswith(b"HTTP/1.1 %d" % expect):
            status = head.split(b"\r\n", 1)[0]
            raise RuntimeError(f"{method} {path}: {status!r} {answer[:200]!r}")
        return answer

    def close(self) -> None:
        self.writer.close()


_RECORD_LINE = re.compile(rb"^data: (\{[^\n]*\"ts\":[^\n]*)\n", flags=re.M)


def latencies(received: list[tuple[float, bytes]]) -> list[float]:
    """Each record's arrival (the time the piece holding the end of its data line came) less its
    append (its `ts`), in ms, from what one stream received, as it came."""
    body = b"".join(data for _, data in received)
    ends = list(itertools.accumulate(len(data) for _, data in received))
    found = []
    for line in _RECORD_LINE.finditer(body):
        arrived_ms = received[bisect.bisect_left(ends, line.end())][0]
        found.append(arrived_ms - json.loads(line.group(1))["ts"])
    return found


async def _streams_run(
    port: int, pid: int, streams_n: int, sessions: int
) -> tuple[float, dict[str, list[float]]]:
    """Open the streams, measure their memory, then run one turn on every session twice: all at once
    (`burst`), then at seeded random times over `SPREAD_S` (`spread`); each record's latency."""
    import httpx

    sids = [f"s{n:02d}" for n in range(sessions)]
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=WAIT_S) as client:
        last = {}
        for sid in sids:
            done = await client.post(
                f"/v1/sessions/{sid}/messages?wait=true", json={"text": "List the files."}
            )
            last[sid] = done.json()["last_seq"]
        before = proc_status_kib("VmRSS", pid=pid)[0]
        streams = [
            await _Stream.open(port, sids[n % sessions], last[sids[n % sessions]]) for n in range(streams_n)
        ]
        await asyncio.sleep(1.0)  # the streams caught up (nothing to catch up) and wait for news
        per_stream = (proc_status_kib("VmRSS", pid=pid)[0] - before) / streams_n
        rng = random.Random(SPREAD_SEED)
        starts = {"burst": [0.0] * sessions, "spread": [rng.uniform(0, SPREAD_S) for _ in sids]}
        found: dict[str, list[float]] = {}
        for run, (name, offsets) in enumerate(starts.items(), 1):
            for stream in streams:
                stream.received = []
            reading = [asyncio.ensure_future(stream.until_completed(run)) for stream in streams]

            async def send(sid: str, after_s: float) -> None:
                await asyncio.sleep(after_s)
                await client.post(f"/v1/sessions/{sid}/messages", json={"text": "Again."})

            # the reader's GC off while it reads (as `timeit` does): a full collection of the bench
            # process stalls every stream's read at once (up to 120 ms) and would count as latency
            gc.collect()
            gc.disable()
            try:
                await asyncio.gather(*(send(sid, at) for sid, at in zip(sids, offsets, strict=True)))
                await asyncio.wait_for(asyncio.gather(*reading), WAIT_S)
            finally:
                gc.enable()
            found[name] = [ms for stream in streams for ms in latencies(stream.received)]
        for stream in streams:
            stream.close()
    return per_stream, found


def _percentiles(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    return ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], ordered[-1]


def many_streams(streams: int = STREAMS, sessions: int = SESSIONS) -> list[Figure]:
    from cairn.demo.http_demo import Server

    root = Path(tempfile.mkdtemp(prefix="cairn-bench-http-streams-"))
    server = Server(root)
    try:
        server.start()
        assert server.proc is not None
        with LoadMeter() as load:
            per_stream, found = asyncio.run(_streams_run(server.port, server.proc.pid, streams, sessions))
    finally:
        server.end()
        shutil.rmtree(root, ignore_errors=True)
    p50, p99, top = _percentiles(found["spread"])
    b50, b99, btop = _percentiles(found["burst"])
    burst = (
        f"all {sessions} turns at once: p50 {b50:.1f} ms, p99 {b99:.1f} ms, max {btop:.1f} ms over "
        f"{len(found['burst'])} arrivals (one event loop writes every stream's bytes)"
    )
    return [
        Figure.measured(
            "http.stream_memory_kib",
            round(per_stream, 1),
            "KiB",
            f"the server's RSS per open event stream, {streams} streams on {sessions} sessions",
            load,
            target=f"<= {STREAM_KIB:g} KiB",
            met=per_stream <= STREAM_KIB,
        ),
        Figure.measured(
            "http.event_latency_p99_ms",
            round(p99, 1),
            "ms",
            f"from a record's append (its ts) to a client, over {len(found['spread'])} arrivals on {streams} "
            f"streams, a turn on each of {sessions} sessions started at a seeded random time within "
            f"{SPREAD_S:g} s; p50 {p50:.1f} ms, max {top:.1f} ms; {burst}",
            load,
            target=f"<= {LATENCY_P99_MS:g} ms",
            met=p99 <= LATENCY_P99_MS,
        ),
        Figure.measured("http.event_latency_burst_p99_ms", round(b99, 1), "ms", burst, load, explore=True),
    ]


def run(quick: bool) -> list[Figure]:
    try:
        import httpx  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        return [unavailable("http", f"needs the http extra and httpx: {exc}")]
    return [turn_overhead(*SHAPES[quick]), *many_streams()]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:  # the API server `turn_overhead` starts: --serve STORE WORKSPACES
        asyncio.run(_serve(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        from cairn import bench

        sys.exit(bench.main(suite="http"))
