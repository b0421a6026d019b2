"""`cairn export --format otlp`: traces received by a real OTLP/HTTP receiver, and the OTLP/JSON file.

The receiver is an `http.server` on 127.0.0.1 that takes POST /v1/traces
with a protobuf body and decodes it with the official
`ExportTraceServiceRequest`. What arrives is compared with the log read
through `Journal.read`: one trace per closed turn, a chat span per
request, a tool span per tool result, a span per compaction, hand-off and
slimming; parent links, times, token figures and errors.
"""

from __future__ import annotations

import base64
import concurrent.futures
import json
import logging
import socket
import sys
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from cairn import Host, HostConfig, cli, demo
from cairn.actors.provider.scripted import Reply, ScriptedProvider, http_error
from cairn.actors.tools import ToolInvocation, ToolOutcome
from cairn.audit.otlp import endpoint_url, span_id_of, trace_id_of
from cairn.events.kinds import (
    AssistantMessage,
    CheckpointCommitted,
    CompactionFailed,
    ContextSlimmed,
    Handoff,
    ProviderError,
    Request,
    ToolResult,
    TurnCancelled,
    TurnCompleted,
    TurnFailed,
    TurnStarted,
    Usage,
)
from cairn.events.model import ToolCall
from cairn.store import Journal
from tests.audit.conftest import BROKEN
from tests.store.helpers import msg, started

INTERNAL, CLIENT = 1, 3  # SpanKind in OTLP
STATUS_ERROR = 2  # Status.code


class Receiver:
    """An OTLP/HTTP traces receiver on 127.0.0.1: keeps every decoded request (or answers `status`)."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.requests: list[ExportTraceServiceRequest] = []
        self.seen: list[tuple[str, str | None, str | None]] = []  # path, content type, encoding
        self.authorization: list[str | None] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.seen.append(
                    (self.path, self.headers.get("Content-Type"), self.headers.get("Content-Encoding"))
                )
                outer.authorization.append(self.headers.get("Authorization"))
                if outer.status == 200 and self.path == "/v1/traces":
                    outer.requests.append(ExportTraceServiceRequest.FromString(body))
                    code = 200
                else:
                    code = outer.status if outer.status != 200 else 404
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(code)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@dataclass(frozen=True)
class Span:
    trace_id: str
    span_id: str
    parent: str
    name: str
    kind: int
    start: int
    end: int
    attributes: dict[str, Any]
    status: int
    message: str


def _value(value: Any) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, which)


def spans_of(requests: list[ExportTraceServiceRequest]) -> list[Span]:
    out = []
    for request in requests:
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                assert scope.scope.name == "cairn.audit.otlp"
                for s in scope.spans:
                    out.append(
                        Span(
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent=s.parent_span_id.hex(),
                            name=s.name,
                            kind=s.kind,
                            start=s.start_time_unix_nano,
                            end=s.end_time_unix_nano,
                            attributes={a.key: _value(a.value) for a in s.attributes},
                            status=s.status.code,
                            message=s.status.message,
                        )
                    )
    return out


def op(span: Span) -> str:
    """A span's kind of work: the GenAI operation, or the cairn span's name."""
    return str(span.attributes.get("gen_ai.operation.name", span.name))


def export(store: Path, *extra: str) -> int:
    return cli.main(["export", "--store", str(store), "--format", "otlp", *extra])


def read_file(path: Path) -> list[ExportTraceServiceRequest]:
    """The OTLP/JSON file's lines as messages: ids from hex to protobuf JSON's base64, then json_format."""
    requests = []
    for line in path.read_text(encoding="utf-8").splitlines():
        data = json.loads(line)
        for resource in data["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                for span in scope["spans"]:
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if key in span:
                            assert len(span[key]) in (16, 32) and span[key] == span[key].lower()
                            span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
        requests.append(json_format.ParseDict(data, ExportTraceServiceRequest()))
    return requests


@dataclass
class FromLog:
    """What the sound sessions' log says the traces must hold."""

    turns: dict[tuple[str, str], tuple[int, int, bool]]  # (sid, turn) -> start ms, end ms, failed
    requests: dict[tuple[str, str], dict[str, Any]]  # (sid, request id) -> turn, ts, end, tokens, error
    tools: dict[tuple[str, int], dict[str, Any]]  # (sid, seq) -> turn, start, end, call id, status
    instants: Counter[str]
    usage: dict[str, tuple[int, int]]  # sid -> sum of prompt tokens, of completion tokens


def from_log(store: Path) -> FromLog:
    log = FromLog({}, {}, {}, Counter(), {})
    with Journal.open(store, readonly=True) as journal:
        for summary in journal.sessions():
            sid = summary.sid
            if sid == BROKEN:
                continue
            prompt = completion = 0
            open_turn: tuple[str, int] | None = None
            prev = None
            for r in journal.read(sid):
                e = r.event
                if isinstance(e, TurnStarted):
                    open_turn = (e.turn_id, r.ts)
                elif isinstance(e, TurnCompleted | TurnFailed | TurnCancelled):
                    assert open_turn is not None and open_turn[0] == e.turn_id
                    log.turns[(sid, e.turn_id)] = (open_turn[1], r.ts, isinstance(e, TurnFailed))
                    open_turn = None
                elif isinstance(e, Request):
                    log.requests[(sid, e.request_id)] = {
                        "turn": e.turn_id,
                        "ts": r.ts,
                        "end": None,
                        "input": None,
                        "output": None,
                        "error": None,
                    }
                elif isinstance(e, AssistantMessage | Usage | ProviderError):
                    entry = log.requests[(sid, e.request_id)]
                    entry["end"] = r.ts
                    if isinstance(e, Usage):
                        prompt += e.prompt_tokens or 0
                        completion += e.completion_tokens or 0
                        entry["input"] = (entry["input"] or 0) + (e.prompt_tokens or 0)
                        entry["output"] = (entry["output"] or 0) + (e.completion_tokens or 0)
                    if isinstance(e, ProviderError):
                        entry["error"] = e.error_class
                elif isinstance(e, ToolResult):
                    assert open_turn is not None
                    log.tools[(sid, r.seq)] = {
                        "turn": open_turn[0],
                        "start": prev,
                        "end": r.ts,
                        "call": e.call_id,
                        "status": e.status,
                    }
                elif isinstance(e, CheckpointCommitted | CompactionFailed):
                    log.instants["compaction"] += 1
                elif isinstance(e, Handoff):
                    log.instants["handoff"] += 1
                elif isinstance(e, ContextSlimmed):
                    log.instants["context_slimmed"] += 1
                prev = r.ts
            log.usage[sid] = (prompt, completion)
    return log


@pytest.fixture(scope="module")
def received(pristine: Path) -> list[ExportTraceServiceRequest]:
    with Receiver() as receiver:
        assert export(pristine, "--otlp-endpoint", receiver.url) == 1  # 1: the broken session skipped
    assert receiver.seen and all(s == ("/v1/traces", "application/x-protobuf", None) for s in receiver.seen)
    return receiver.requests


@pytest.fixture(scope="module")
def log(pristine: Path) -> FromLog:
    return from_log(pristine)


def test_span_counts_per_kind_equal_the_logs_turns_requests_and_tool_results(
    received: list[ExportTraceServiceRequest], log: FromLog
) -> None:
    spans = spans_of(received)
    kinds = Counter(op(s) for s in spans)
    assert kinds == {
        "invoke_agent": len(log.turns),
        "chat": len(log.requests),
        "execute_tool": len(log.tools),
        "cairn.compaction": log.instants["compaction"],
        "cairn.handoff": log.instants["handoff"],
        "cairn.context_slimmed": log.instants["context_slimmed"],
    }
    assert min(kinds.values()) > 0  # the store has each of them
    assert len(received) == 3  # 1,213 spans in requests of at most 512
    assert BROKEN not in {s.attributes["gen_ai.conversation.id"] for s in spans}


def test_a_trace_per_turn_with_its_spans_as_children_of_the_turn(
    received: list[ExportTraceServiceRequest], log: FromLog
) -> None:
    spans = spans_of(received)
    by_trace: dict[str, list[Span]] = defaultdict(list)
    for s in spans:
        by_trace[s.trace_id].append(s)
    roots = {s.trace_id: s for s in spans if not s.parent}
    assert len(roots) == len(by_trace)  # one root per trace
    turn_traces = {t: r for t, r in roots.items() if op(r) == "invoke_agent"}
    assert len(turn_traces) == len(log.turns)
    assert {
        (r.attributes["cairn.session.id"], r.attributes["cairn.turn.id"]) for r in turn_traces.values()
    } == set(log.turns)
    for trace, members in by_trace.items():
        root = roots[trace]
        for s in members:
            if s is not root:
                assert s.parent == root.span_id
                assert s.attributes["cairn.turn.id"] == root.attributes["cairn.turn.id"]
                assert root.start <= s.start <= s.end <= root.end
    for s in spans:
        if op(s) == "chat":
            request = log.requests[(s.attributes["gen_ai.conversation.id"], s.attributes["cairn.request.id"])]
            assert request["turn"] == s.attributes["cairn.turn.id"]
    ids = [s.span_id for s in spans]
    assert len(set(ids)) == len(ids)
    # a lone span (a compaction, hand-off or slimming outside a turn) is a trace of its own
    lone = [r for r in roots.values() if op(r) != "invoke_agent"]
    assert all(len(by_trace[r.trace_id]) == 1 for r in lone)


def test_token_attributes_equal_the_usage_lines_per_request_and_per_session(
    received: list[ExportTraceServiceRequest], log: FromLog
) -> None:
    sums: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for s in spans_of(received):
        if op(s) != "chat":
            continue
        sid = s.attributes["gen_ai.conversation.id"]
        request = log.requests[(sid, s.attributes["cairn.request.id"])]
        assert s.attributes.get("gen_ai.usage.input_tokens") == request["input"]
        assert s.attributes.get("gen_ai.usage.output_tokens") == request["output"]
        sums[sid][0] += s.attributes.get("gen_ai.usage.input_tokens", 0)
        sums[sid][1] += s.attributes.get("gen_ai.usage.output_tokens", 0)
        assert s.attributes["gen_ai.request.model"] == "scripted-coder"
        assert s.attributes["gen_ai.provider.name"] == s.attributes["gen_ai.system"] == "unknown"
        assert s.name == "chat scripted-coder" and s.kind == CLIENT
    assert {sid: tuple(v) for sid, v in sums.items()} == log.usage
    assert log.usage["extra"] == (65 + 633, 9 + 4)  # the fixture's scripted figures


def test_times_come_from_the_lines_ts(received: list[ExportTraceServiceRequest], log: FromLog) -> None:
    ms = 1_000_000
    for s in spans_of(received):
        sid = s.attributes["gen_ai.conversation.id"]
        if op(s) == "invoke_agent":
            start, end, _failed = log.turns[(sid, s.attributes["cairn.turn.id"])]
            assert (s.start, s.end) == (start * ms, end * ms)
        elif op(s) == "chat":
            request = log.requests[(sid, s.attributes["cairn.request.id"])]
            assert (s.start, s.end) == (request["ts"] * ms, (request["end"] or request["ts"]) * ms)
        elif op(s) == "execute_tool":
            tool = log.tools[(sid, s.attributes["cairn.seq"])]
            assert (s.start, s.end) == (tool["start"] * ms, tool["end"] * ms)
            assert s.attributes["gen_ai.tool.call.id"] == tool["call"]
        else:
            assert s.start == s.end > 1_700_000_000_000 * ms


def test_errors_are_marked_on_failed_requests_turns_and_tools(
    received: list[ExportTraceServiceRequest], log: FromLog
) -> None:
    spans = spans_of(received)
    chats = [s for s in spans if op(s) == "chat"]
    failed = {(s.attributes["gen_ai.conversation.id"], s.attributes["cairn.request.id"]): s for s in chats}
    expected = {key: r["error"] for key, r in log.requests.items() if r["error"] is not None}
    assert {
        key: s.attributes.get("error.type") for key, s in failed.items() if s.status == STATUS_ERROR
    } == expected
    assert ("extra", "r14") in expected and expected[("extra", "r14")] == "bad-request"
    r14 = failed[("extra", "r14")]
    assert r14.attributes["http.response.status_code"] == 400
    assert r14.message == "bad-request: this request is malformed"
    turns = [s for s in spans if op(s) == "invoke_agent"]
    assert {
        (s.attributes["cairn.session.id"], s.attributes["cairn.turn.id"])
        for s in turns
        if s.status == STATUS_ERROR
    } == {key for key, (_s, _e, bad) in log.turns.items() if bad}
    tools = [s for s in spans if op(s) == "execute_tool"]
    assert {s.attributes["cairn.seq"] for s in tools if s.status == STATUS_ERROR} == {
        seq for (_sid, seq), t in log.tools.items() if t["status"] == "error"
    }


def test_ids_are_deterministic_and_derived_from_the_log(
    pristine: Path, received: list[ExportTraceServiceRequest], tmp_path: Path
) -> None:
    with Receiver() as again:
        assert export(pristine, "--otlp-endpoint", again.url) == 1
    assert again.requests == received  # ids, times, attributes, resource: the same requests
    out = tmp_path / "traces.jsonl"
    assert export(pristine, "--to", str(out)) == 1
    assert read_file(out) == received  # the file holds the same requests as the endpoint got
    root = next(s for s in spans_of(received) if s.attributes.get("cairn.turn.id") == "t3" and not s.parent)
    sid = root.attributes["cairn.session.id"]
    assert root.trace_id == f"{trace_id_of(sid, 't3'):032x}"
    assert root.span_id == f"{span_id_of(sid, 't3'):016x}"


def test_the_file_is_one_otlp_json_request_per_line(
    pristine: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "traces.jsonl"
    with caplog.at_level(logging.WARNING, logger="opentelemetry"):
        assert export(pristine, "--to", str(out)) == 1
    assert caplog.records == []  # the SDK warns of a value whose type OTLP has no form for
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3
    first = json.loads(lines[0])
    span = first["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert span["kind"] == INTERNAL and isinstance(span["kind"], int)  # enums as integers
    assert len(span["traceId"]) == 32 and int(span["traceId"], 16)  # ids as hex
    resource = {a["key"]: a["value"] for a in first["resourceSpans"][0]["resource"]["attributes"]}
    assert resource["service.name"] == {"stringValue": "cairn"}
    assert "service.instance.id" not in resource  # the SDK's would be random
    assert not list(tmp_path.glob(".*tmp"))


def test_genai_attribute_names_are_those_of_the_semantic_conventions(
    received: list[ExportTraceServiceRequest],
) -> None:
    from opentelemetry.semconv._incubating.attributes import gen_ai_attributes
    from opentelemetry.semconv.attributes import error_attributes, http_attributes

    known = {v for k, v in vars(gen_ai_attributes).items() if k.startswith("GEN_AI_") and isinstance(v, str)}
    known |= {error_attributes.ERROR_TYPE, http_attributes.HTTP_RESPONSE_STATUS_CODE}
    names = {k for s in spans_of(received) for k in s.attributes if not k.startswith("cairn.")}
    assert names <= known, names - known
    ops = {s.attributes.get("gen_ai.operation.name") for s in spans_of(received)}
    assert ops == {"invoke_agent", "chat", "execute_tool", None}


def test_session_and_since_choose_the_turns(store: Path, tmp_path: Path) -> None:
    with Receiver() as receiver:
        assert export(store, "--otlp-endpoint", receiver.url, "--session", "extra", "--json") == 0
    spans = spans_of(receiver.requests)
    assert {s.attributes["gen_ai.conversation.id"] for s in spans} == {"extra"}
    assert Counter(op(s) for s in spans) == {"invoke_agent": 2, "chat": 3, "execute_tool": 1}
    with Journal.open(store, readonly=True) as journal:
        until = max(s.last_pos for s in journal.sessions()) + 1
    # a turn that opens after `until` is exported by the run that sees it close
    with Journal.open(store) as journal:
        request = Request(
            request_id="r4",
            turn_id="t3",
            attempt=1,
            fingerprint="f",
            history_revision=0,
            projected_tokens=10,
            phase="below_handoff",
            message_count=2,
        )
        journal.append(
            "late", [started(), msg(2), TurnStarted(turn_id="t3", message_id="u2"), request], expected_seq=0
        )
        journal.append(
            "late", [Usage(request_id="r4", prompt_tokens=11, completion_tokens=7)], expected_seq=4
        )
    with Receiver() as receiver:
        assert export(store, "--otlp-endpoint", receiver.url, "--since", str(until), "--json") == 0
    assert receiver.requests == []  # the only new turn is still open
    with Journal.open(store, readonly=True) as journal:
        until2 = journal.session("late").last_pos + 1
    with Journal.open(store) as journal:
        journal.append("late", [TurnCompleted(turn_id="t3", requests=1)], expected_seq=5)
    with Receiver() as receiver:
        assert export(store, "--otlp-endpoint", receiver.url, "--since", str(until2)) == 0
    spans = spans_of(receiver.requests)
    assert sorted(op(s) for s in spans) == ["chat", "invoke_agent"]
    chat = next(s for s in spans if op(s) == "chat")
    assert (chat.attributes["gen_ai.usage.input_tokens"], chat.attributes["gen_ai.usage.output_tokens"]) == (
        11,
        7,
    )
    assert chat.attributes["gen_ai.request.model"] == "m-1"  # the session's, the request names none
    root = next(s for s in spans if not s.parent)
    assert root.attributes["cairn.user_message.chars"] == len("message 2")


def test_headers_service_name_and_provider_name_reach_the_backend(
    pristine: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the README's Langfuse example relies on: the standard OTLP header variable."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Basic cGs6c2s=")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "agents")
    with Receiver() as receiver:
        argv = ["--otlp-endpoint", receiver.url, "--session", "extra", "--gen-ai-provider", "openai"]
        assert export(pristine, *argv) == 0
    assert receiver.authorization == ["Basic cGs6c2s="]
    resource = {
        a.key: a.value.string_value for a in receiver.requests[0].resource_spans[0].resource.attributes
    }
    assert resource["service.name"] == "agents"
    chats = [s for s in spans_of(receiver.requests) if op(s) == "chat"]
    assert len(chats) == 3 and {s.attributes["gen_ai.provider.name"] for s in chats} == {"openai"}


def test_open_turns_are_counted_not_exported(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with Journal.open(store) as journal:
        journal.append(
            "open", [started(), msg(2), TurnStarted(turn_id="t3", message_id="u2")], expected_seq=0
        )
    with Receiver() as receiver:
        assert export(store, "--otlp-endpoint", receiver.url, "--session", "open", "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["open_turns"] == 1 and report["traces"] == 0 and receiver.requests == []


class HostileTool:
    """Output with control characters (NUL, ESC, BEL) and 100,000 characters; a failing second tool."""

    schemas = ('{"name":"hostile","parameters":{"type":"object"}}',)
    read_only = ("hostile",)

    def __call__(self, invocation: ToolInvocation) -> ToolOutcome:
        if invocation.call.id == "h-2":
            return ToolOutcome(content="\x00boom\x1b", status="error")
        return ToolOutcome(content="\x00\x01\x1b[2J\x07\r\n\t" + "A" * 99_990)


@pytest.fixture(scope="module")
def hostile_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hostile") / "store"
    huge_arguments = json.dumps({"x": "\x00\x1f" + "b" * 50_000})
    provider = ScriptedProvider(
        turns=(
            Reply(
                text="calling",
                tool_calls=(ToolCall("h-1", "hostile", huge_arguments), ToolCall("h-2", "hostile", "{}")),
            ),
            Reply(text="done"),
            http_error(400, "\x00bad\x1b[31m request " + "E" * 20_000),
        )
    )
    with Host.open(
        root, provider=provider, tools=HostileTool(), settings=demo.SETTINGS, config=HostConfig(sweep=False)
    ) as host:
        assert host.send("hostile", "go \x00\x1b", workspace=root).result(60).ok
        assert host.send("hostile", "again").result(60).status == "failed"
    return root


def test_tool_arguments_and_results_are_sent_only_with_otlp_content(
    hostile_store: Path, tmp_path: Path
) -> None:
    out = tmp_path / "no-content.jsonl"
    assert export(hostile_store, "--to", str(out)) == 0
    spans = spans_of(read_file(out))
    tools = [s for s in spans if op(s) == "execute_tool"]
    assert len(tools) == 2
    for tool in tools:
        assert "gen_ai.tool.call.result" not in tool.attributes
        assert "gen_ai.tool.call.arguments" not in tool.attributes
        assert tool.attributes["cairn.tool.result.chars"] > 0  # the sizes still go out
    failed_tool = next(s for s in tools if s.attributes.get("gen_ai.tool.call.id") == "h-2")
    assert failed_tool.status == STATUS_ERROR and failed_tool.message == "the tool failed"
    # nothing of the tool's output or arguments anywhere in the file
    assert "AAAAAAAAAA" not in out.read_text() and "bbbbbbbbbb" not in out.read_text()


def test_hostile_values_are_bounded_and_cleaned(hostile_store: Path, tmp_path: Path) -> None:
    with Receiver() as receiver:
        assert export(hostile_store, "--otlp-endpoint", receiver.url, "--otlp-content") == 0
    out = tmp_path / "hostile.jsonl"
    assert export(hostile_store, "--to", str(out), "--otlp-content") == 0
    assert read_file(out) == receiver.requests
    spans = spans_of(receiver.requests)
    work = Counter(op(s) for s in spans if op(s) in ("invoke_agent", "chat", "execute_tool"))
    assert work == {"invoke_agent": 2, "chat": 3, "execute_tool": 2}  # (a compaction may come too)
    controls = {chr(c) for c in range(32)} - {"\t", "\n", "\r"} | {"\x7f"}
    for s in spans:
        for value in s.attributes.values():
            for text in value if isinstance(value, list) else [value]:
                if isinstance(text, str):
                    assert len(text) <= 4096 and not controls & set(text)
    tool = next(s for s in spans if s.attributes.get("gen_ai.tool.call.id") == "h-1")
    result = tool.attributes["gen_ai.tool.call.result"]
    assert result == ("\ufffd\ufffd\ufffd[2J\ufffd\r\n\t" + "A" * 99_990)[:4096]
    assert tool.attributes["cairn.tool.result.chars"] == 100_000
    assert len(tool.attributes["gen_ai.tool.call.arguments"]) == 4096
    assert tool.attributes["cairn.tool.arguments.chars"] == len(json.dumps({"x": "\x00\x1f" + "b" * 50_000}))
    failed_tool = next(s for s in spans if s.attributes.get("gen_ai.tool.call.id") == "h-2")
    assert failed_tool.status == STATUS_ERROR and failed_tool.attributes["error.type"] == "tool_error"
    error = next(s for s in spans if op(s) == "chat" and s.status == STATUS_ERROR)
    assert error.attributes["cairn.provider_error.message"].startswith("\ufffdbad\ufffd[31m request EEE")
    # the host keeps 1,000 characters of a provider's message (with its `…`); the span keeps them all
    assert len(error.attributes["cairn.provider_error.message"]) == 1000
    assert error.message == "bad-request: " + error.attributes["cairn.provider_error.message"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def bounded(argv: list[str]) -> int:
    """Run the CLI in a thread and fail (rather than hang the suite) if it does not return in 120 s."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(cli.main, argv).result(timeout=120)


def test_an_unreachable_endpoint_is_a_typed_error_within_the_timeout(
    pristine: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    argv = [
        "export",
        "--store",
        str(pristine),
        "--format",
        "otlp",
        "--otlp-endpoint",
        url,
        "--otlp-timeout",
        "1",
    ]
    assert bounded(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"cairn: OtlpDeliveryFailed: {url}/v1/traces did not take a request of 512 spans (")
    assert "0 spans were delivered before it" in err


def test_an_endpoint_that_never_answers_is_cut_off_by_the_timeout(
    pristine: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as silent:  # accepts connections (backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        argv = ["export", "--store", str(pristine), "--format", "otlp", "--otlp-endpoint", url]
        assert bounded([*argv, "--otlp-timeout", "1", "--session", "extra"]) == 2
    assert "OtlpDeliveryFailed" in capsys.readouterr().err


def test_an_endpoint_that_refuses_is_a_typed_error_naming_the_status(
    pristine: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Receiver(status=400) as receiver:
        assert (
            bounded(["export", "--store", str(pristine), "--format", "otlp", "--otlp-endpoint", receiver.url])
            == 2
        )
    assert len(receiver.seen) == 1  # a 400 is not retried
    err = capsys.readouterr().err
    assert "OtlpDeliveryFailed" in err and "code: 400" in err


def test_endpoint_urls() -> None:
    assert endpoint_url("http://127.0.0.1:4318") == "http://127.0.0.1:4318/v1/traces"
    assert endpoint_url("https://collector/") == "https://collector/v1/traces"
    assert (
        endpoint_url("http://lf:3000/api/public/otel/v1/traces") == "http://lf:3000/api/public/otel/v1/traces"
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--to", "{tmp}/x.jsonl", "--otlp-endpoint", "http://127.0.0.1:1"],
            "one of --to FILE and --otlp-endpoint",
        ),
        ([], "one of --to FILE and --otlp-endpoint"),
        (["--otlp-endpoint", "ftp://127.0.0.1/"], "must be an http:// or https:// URL"),
        (["--otlp-endpoint", "http://"], "must be an http:// or https:// URL"),
        (["--otlp-endpoint", "http://127.0.0.1:99999"], "bad port"),
        (["--to", "{tmp}/exists.jsonl"], "exists: name a new file"),
        (["--to", "{tmp}/link.jsonl"], "exists: name a new file"),
        (["--to", "{tmp}/no/such/dir/x.jsonl"], "is not a directory"),
        (["--to", "{tmp}/x.jsonl", "--session", "../etc"], "invalid session id"),
        (["--to", "{tmp}/x.jsonl", "--session", "nobody"], "no session 'nobody'"),
        (["--to", "{tmp}/x.jsonl", "--since", "-1"], "--since must be a position"),
        (["--to", "{tmp}/x.jsonl", "--since", "999999"], "--since 999999 is past what there is to export"),
        (
            ["--otlp-endpoint", "http://127.0.0.1:1", "--otlp-timeout", "0"],
            "--otlp-timeout must be more than 0",
        ),
        (["--to", "{tmp}/x.jsonl", "--gen-ai-provider", ""], "--gen-ai-provider must be"),
    ],
)
def test_bad_targets_and_arguments_are_refused_before_anything_is_written(
    pristine: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    (tmp_path / "exists.jsonl").write_text("keep me")
    (tmp_path / "link.jsonl").symlink_to(tmp_path / "elsewhere")
    before = sorted(p.name for p in tmp_path.iterdir())
    assert export(pristine, *(a.replace("{tmp}", str(tmp_path)) for a in argv)) == 2
    assert message in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert (tmp_path / "exists.jsonl").read_text() == "keep me"


def test_the_endpoint_option_needs_the_otlp_format(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["export", "--store", str(tmp_path), "--otlp-endpoint", "http://127.0.0.1:1"]) == 2
    assert "--otlp-endpoint goes with --format otlp" in capsys.readouterr().err
    argv = ["export", "--nats", "nats://127.0.0.1:1", "--format", "otlp", "--to", str(tmp_path / "t")]
    assert cli.main(argv) == 2
    assert "reads a local store" in capsys.readouterr().err


def test_a_missing_extra_is_one_line_naming_it(
    pristine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)
    assert export(pristine, "--to", str(tmp_path / "x.jsonl")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "cairn: this command needs opentelemetry, from the audit extra: pip install 'cairn[audit]'"
    ]
    assert list(tmp_path.iterdir()) == []


def _records(events: list[Any], *, first_ts: int = 1_800_000_000_000) -> list[Any]:
    from cairn.events.codec import Record

    return [
        Record(pos=100 + i, sid="s", seq=i + 1, ts=first_ts + 10 * i, prev="", event=e)
        for i, e in enumerate(events)
    ]


def _request(request_id: str, turn_id: str) -> Request:
    return Request(
        request_id=request_id,
        turn_id=turn_id,
        attempt=1,
        fingerprint="f",
        history_revision=0,
        projected_tokens=None,
        phase="below_handoff",
        message_count=1,
    )


def test_the_fold_places_unanswered_requests_lone_compactions_and_stray_lines() -> None:
    from cairn.audit.otlp import TraceFold
    from tests.store.helpers import checkpoint

    events = [
        started(),  # seq 1, ts +0
        checkpoint(1, 1),  # seq 2, ts +10: outside any turn
        TurnStarted(turn_id="t3", message_id="nobody"),  # seq 3: its turn never closes ...
        TurnStarted(turn_id="t4", message_id="u0"),  # seq 4: ... this one starts over it
        _request("r5", "t3"),  # seq 5: names a turn that is not the open one
        _request("r6", "t4"),  # seq 6, ts +50: never answered
        Usage(request_id="r99", prompt_tokens=1),  # seq 7: an unknown request
        TurnFailed(turn_id="t4", phase="interrupted"),  # seq 8, ts +70
    ]
    fold = TraceFold("s", provider="p", since=0)
    spans = [span for record in _records(events) for span in fold.add(record)]
    assert [(s.category, s.name) for s in spans] == [
        ("compaction", "cairn.compaction"),
        ("turn", "invoke_agent cairn"),
        ("chat", "chat m-1"),
    ]
    lone, root, chat = spans
    assert lone.trace_id == trace_id_of("s", "line", 2) and lone.parent_id is None
    assert lone.attributes["cairn.compaction.tokens_before"] == 1000
    assert lone.attributes["cairn.compaction.tokens_after"] == 100
    assert root.trace_id == chat.trace_id == trace_id_of("s", "t4") and chat.parent_id == root.span_id
    assert root.error == "interrupted" and root.attributes["error.type"] == "interrupted"
    assert chat.attributes["cairn.request.outcome"] == "unanswered" and chat.error is None
    assert (chat.start_ns, chat.end_ns) == (1_800_000_000_050_000_000, 1_800_000_000_070_000_000)
    assert "gen_ai.usage.input_tokens" not in chat.attributes
    assert (fold.abandoned_turns, fold.unplaced, fold.open_turns) == (1, 2, 0)


def test_the_fold_exports_only_what_closes_at_since_or_later() -> None:
    from cairn.audit.otlp import TraceFold
    from tests.store.helpers import checkpoint

    events = [
        started(),  # pos 100
        TurnStarted(turn_id="t2"),  # pos 101
        TurnCompleted(turn_id="t2"),  # pos 102
        checkpoint(1, 3),  # pos 103
        TurnStarted(turn_id="t5"),  # pos 104 (before since), closed at 105
        TurnCompleted(turn_id="t5"),
        TurnStarted(turn_id="t7"),  # still open at the end
    ]
    fold = TraceFold("s", provider="p", since=104)
    spans = [span for record in _records(events) for span in fold.add(record)]
    assert [(s.category, s.attributes.get("cairn.turn.id")) for s in spans] == [("turn", "t5")]
    assert fold.open_turns == 1


def test_a_servers_tool_span_names_the_server_and_its_tool(received: list[ExportTraceServiceRequest]) -> None:
    """Issue 26 point 3: the every-kind store's `big` comes back as an MCP server's tool does."""
    tools = [s for s in spans_of(received) if op(s) == "execute_tool"]
    named = {(s.attributes["gen_ai.tool.name"], s.attributes.get("cairn.tool.server")) for s in tools}
    assert ("big", "bigs") in named and all(server in (None, "bigs") for _, server in named)
    assert {s.attributes["cairn.tool.server_tool"] for s in tools if "cairn.tool.server" in s.attributes} == {
        "make_big"
    }
