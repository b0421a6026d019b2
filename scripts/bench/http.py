"""The HTTP API's cost (issue 25 point 7): a turn through HTTP and SSE against the same turn in process,
and 1,000 event streams open at once on one server.

Usage: python -m cairn.bench.http [--quick] [--json]

- **turn overhead**: the same scripted turn (a tool call, then a reply in
  deltas) through an `AsyncHost` in this process, and through the API
  served by uvicorn in a process of its own (`http_child`), read from here as a host would
  (the session's event stream held open, each message posted and read there
  to its `turn-completed`; the 202 answers once the message is recorded).
  The client is HTTP/1.1 on two kept-alive sockets (`_Poster`, `_Stream`),
  so the figure is the API's cost and not a Python client library's: httpx
  spends several times a bare round trip of its own on each request here.
  The two alternate run by run (`interleave`); each run is `turns` turns,
  one after the other; a run's figure is its median turn.
  Judged: the median over the pairs of (HTTP - in process), at most 2 ms.
- **1,000 streams**: `cairn serve --http` as a child process with the
  demo's scripted agent; 50 sessions, 20 event streams open on each (raw
  sockets, read here, parsed after the run), then one turn on every
  session, twice: started at seeded random times within 5 s (about 10 a
  second, as a host's users send them), then all at once. Judged: the
  server's resident memory per open stream (its RSS with the streams open
  and caught up, less before, over 1,000) at most 64 KiB; the time from a
  record's append (its `ts`) to its arrival at a client, p99 over every
  record every stream received in the first run, at most 50 ms. The burst's
  p99 is shown beside it (`--explore`: its own figure): 50 turns' records
  written to 1,000 sockets by one event loop, a worst case bound by the
  loop's writes, not by waiting.

`--quick`: 20 turns per run, 3 pairs; full: 50 turns, 7 pairs. The stream
part is the same in both (one run).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cairn.bench._figure import Figure, unavailable
from cairn.bench._measure import LoadMeter, interleave

QUICK = {"turns": 20, "rounds": 3}
FULL = {"turns": 50, "rounds": 7}
STREAMS, SESSIONS = 1_000, 50
#: the judged bounds
ADDED_P50_MS = 2.0
STREAM_KIB = 64.0
LATENCY_P99_MS = 50.0
WAIT_S = 60.0
#: the judged latency's turns start at seeded random times within this many seconds (about 10 a
#: second on 50 sessions, each streamed to 20 clients); the burst (all at once) is shown beside it
SPREAD_S = 5.0
SPREAD_SEED = 25


def turn_provider() -> Any:
    from cairn import Reply, ScriptedProvider
    from cairn.events.model import ToolCall

    def agent(request: Any) -> Any:
        if request.messages and request.messages[-1].role == "tool":
            return Reply(text="I read it; nothing in there needs a change. Done for now.")
        call = ToolCall(f"call-{len(request.messages)}", "read", '{"path": "src/app.py"}')
        return Reply(text="Let me read the file first.", tool_calls=(call,))

    return ScriptedProvider(responder=agent, chunk_chars=12, keep_requests=False)


def read_tool(invocation: Any) -> Any:
    from cairn import ToolOutcome

    return ToolOutcome(content="nothing to see here", effect="read")


class TurnRuns:
    """The two measures of the turn overhead: each returns its run's median turn, in ms."""

    def __init__(self, root: Path, turns: int) -> None:
        from cairn.actors.host.async_host import AsyncHost

        self.turns = turns
        self.root = root
        (root / "ws").mkdir()
        argv = [sys.executable, "-m", "cairn.bench.http_child", str(root / "served"), str(root / "ws")]
        self.child = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        line = self.child.stdout.readline() if self.child.stdout is not None else ""
        if not line.startswith("serving http://"):
            self.child.kill()
            raise RuntimeError(f"the API server did not start: {line!r}")
        self.address = line.split()[1]
        self.port = int(self.address.rsplit(":", 1)[1])
        self.loop = asyncio.new_event_loop()
        self.host = self.loop.run_until_complete(
            AsyncHost.open(root / "local", provider=turn_provider(), tools=read_tool)
        )
        self.client = self._client()
        self.sent = 0

    def _client(self) -> Any:
        import httpx

        return httpx.AsyncClient(base_url=self.address, timeout=WAIT_S)

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

    def via_http(self) -> float:
        """A run's median turn over HTTP: the session's stream held open, each message posted and read
        to its `turn-completed` there (the session is made, untimed, by the first run)."""

        async def run() -> list[float]:
            if not self.sent:
                first = await self.client.post("/v1/sessions/s/messages?wait=true", json={"text": "hello"})
                if first.status_code != 200:
                    raise RuntimeError(f"first send: {first.status_code} {first.text}")
                self.sent = 1
            last = (await self.client.get("/v1/sessions/s")).json()["last_seq"]
            times = []
            stream = await _Stream.open(self.port, "s", last)
            poster = await _Poster.open(self.port)
            try:
                for turn in range(1, self.turns + 1):
                    began = time.perf_counter()
                    await poster.post("/v1/sessions/s/messages", b'{"text": "have a look"}', expect=202)
                    await stream.until_completed(turn)
                    times.append(time.perf_counter() - began)
                    stream.received.clear()
            finally:
                stream.close()
                poster.close()
            return times

        return statistics.median(self.loop.run_until_complete(run())) * 1000

    def close(self) -> None:
        self.loop.run_until_complete(self.client.aclose())
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


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        found = re.search(r"^VmRSS:\s+(\d+) kB", status.read(), flags=re.M)
    if found is None:
        raise RuntimeError("no VmRSS in /proc")
    return int(found.group(1))


class _Stream(asyncio.Protocol):
    """One SSE connection, read by callbacks: every piece that arrives is kept with its arrival time
    (`received`, parsed after the run by `latencies`), and the turns it saw end are counted. No
    coroutine runs per read, so one loop keeps up with a thousand of them and a late stamp is the
    server's lateness, not the reader's."""

    MARK = b"event: turn-completed"

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.head: asyncio.Future[bytes] = loop.create_future()
        self.received: list[tuple[float, bytes]] = []
        self.completed = 0
        self._waiter: asyncio.Future[None] | None = None
        self._pending = b""  # the response head, until it is whole
        self._tail = b""  # the last bytes, for a mark split between two reads
        self.transport: asyncio.Transport | None = None

    @classmethod
    async def open(cls, port: int, sid: str, after: int) -> _Stream:
        loop = asyncio.get_running_loop()
        transport, stream = await loop.create_connection(cls, "127.0.0.1", port)
        transport.write(
            f"GET /v1/sessions/{sid}/events?after={after} HTTP/1.1\r\nHost: bench\r\n\r\n".encode()
        )
        head = await stream.head
        if not head.startswith(b"HTTP/1.1 200"):
            transport.close()
            raise RuntimeError(f"stream of {sid}: {head[:60]!r}")
        return stream

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

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
        if self.transport is not None:
            self.transport.close()


class _Poster:
    """Requests with a JSON body on one kept-alive connection, each answer read to its end."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> _Poster:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def post(self, path: str, body: bytes, *, expect: int) -> bytes:
        """POST `body` to `path`; the answer's body (`RuntimeError` unless its status is `expect`)."""
        head_lines = b"POST %s HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n" % path.encode()
        self.writer.write(head_lines + b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        head = await self.reader.readuntil(b"\r\n\r\n")
        found = re.search(rb"\r\ncontent-length: *(\d+)", head, flags=re.I)
        answer = await self.reader.readexactly(int(found.group(1))) if found else b""
        if not head.startswith(b"HTTP/1.1 %d" % expect):
            status = head.split(b"\r\n", 1)[0]
            raise RuntimeError(f"POST {path}: {status!r} {answer[:200]!r}")
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


@contextlib.contextmanager
def _collector_off() -> Iterator[None]:
    """This process's garbage collector off while the streams are read (as `timeit` does): a full
    collection of the bench process, which holds what every suite before left, stalls every
    stream's read at once (up to 120 ms, seen) and would count as the server's latency."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


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
        before = _rss_kib(pid)
        streams = []
        for n in range(streams_n):
            sid = sids[n % sessions]
            streams.append((sid, await _Stream.open(port, sid, last[sid])))
        await asyncio.sleep(1.0)  # the streams caught up (nothing to catch up) and wait for news
        per_stream = (_rss_kib(pid) - before) / streams_n
        rng = random.Random(SPREAD_SEED)
        starts = {"burst": [0.0] * sessions, "spread": [rng.uniform(0, SPREAD_S) for _ in sids]}
        found: dict[str, list[float]] = {}
        for run, (name, offsets) in enumerate(starts.items(), 1):
            for _, stream in streams:
                stream.received = []
            reading = [asyncio.ensure_future(stream.until_completed(run)) for _, stream in streams]

            async def send(sid: str, after_s: float) -> None:
                await asyncio.sleep(after_s)
                await client.post(f"/v1/sessions/{sid}/messages", json={"text": "Again."})

            with _collector_off():
                await asyncio.gather(*(send(sid, at) for sid, at in zip(sids, offsets, strict=True)))
                await asyncio.wait_for(asyncio.gather(*reading), WAIT_S)
            found[name] = [ms for _, stream in streams for ms in latencies(stream.received)]
        for _, stream in streams:
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
    shape = QUICK if quick else FULL
    return [turn_overhead(shape["turns"], shape["rounds"]), *many_streams()]


def main(argv: list[str] | None = None) -> int:
    """Run this suite alone, with the report and flags of `cairn bench`."""
    from cairn import bench

    return bench.main(sys.argv[1:] if argv is None else argv, suite="http")


if __name__ == "__main__":
    sys.exit(main())
