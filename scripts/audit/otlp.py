"""`cairn export --format otlp`: a store's sessions as OpenTelemetry traces (GenAI semantic conventions).

One trace per turn, built from the log alone:

    invoke_agent cairn            the turn (root): turn-started .. turn-completed / turn-failed
    ├─ chat MODEL                 one per `request` line: from the request to its last answer line
    ├─ execute_tool NAME          one per `tool-result` line: from the line before it to the result
    ├─ cairn.compaction           one per `checkpoint-committed` / `compaction-failed` (an instant)
    ├─ cairn.handoff              one per `handoff` (an instant)
    └─ cairn.context_slimmed      one per `context-slimmed` (an instant)

A compaction, hand-off or slimming outside any turn is a trace of its own
with that one span. Tool spans are children of the turn, as the GenAI
conventions put `execute_tool` beside the `chat` that asked for it (the
request is named in `cairn.request.id`). Tools run one after another and
each result is written when its tool returns, so a tool span runs from the
line before its result (the answer that asked for it, or the previous
result) to the result.

Times are the lines' `ts` (unix ms, as nanoseconds); the log records when a
checkpoint was committed, not when its compaction began, so compaction,
hand-off and slimming are zero-length spans at their line. Ids are derived
from the log (SHA-256 of the key, see `trace_id_of` / `span_id_of`): the
trace of a turn from (sid, turn id), the turn's root span from the same key,
a chat span from (sid, turn id, request id), every other span from (sid, its
line's seq). Exporting the same log again gives the same ids, so a backend
that receives a turn twice can tell.

Which turns a run exports: those whose closing line (`turn-completed` /
`turn-failed`) lies at a position in [since, until) (see
`cairn.audit.export`), and the lone spans whose line does. A turn still
open at `until` is not exported (counted as `open_turns`): it is exported
by the run that sees it close. A session is read twice through the
journal's checked path, like the table export: a corrupt session is
reported and none of its spans are sent.

Values are bounded: every string taken from the log (tool arguments and
results, error messages, names, ids) is cut to `MAX_VALUE_CHARS` characters,
its C0 control characters other than tab, newline and carriage return (NUL
among them, which some backends' databases refuse) become U+FFFD, and the
SDK's `SpanLimits` enforce the same length on every attribute. A span's
attributes are a fixed set, so their number is bounded too. The sizes that
were cut stay visible (`cairn.tool.result.chars`, ...).

`--to FILE` writes OTLP/JSON as the collector's file exporter does: one
`ExportTraceServiceRequest` per line (at most `BATCH_SPANS` spans each), in
protobuf's JSON mapping with OTLP's changes (trace and span ids as hex,
enums as integers). `--otlp-endpoint URL` sends the same requests as
OTLP/HTTP protobuf with the SDK's exporter.

This module runs the export; its parts are `otlp_fold` (which lines make
which span), `otlp_spans` (what each span holds), `otlp_sdk` (the SDK spans)
and `otlp_sinks` (the file and the endpoint).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cairn.audit import require
from cairn.audit.export import ExportRefused, Progress, Skipped, check_session, sessions_to_export
from cairn.audit.otlp_fold import TraceFold
from cairn.audit.otlp_sdk import SCOPE, SdkSpans
from cairn.audit.otlp_sinks import (
    TRACES_PATH,
    EndpointSink,
    FileSink,
    OtlpDeliveryFailed,
    endpoint_url,
    otlp_json,
)
from cairn.audit.otlp_spans import (
    CATEGORIES,
    MAX_ITEMS,
    MAX_VALUE_CHARS,
    PlannedSpan,
    clean,
    span_id_of,
    trace_id_of,
)
from cairn.events.codec import Record, validate_session_id

__all__ = [
    "BATCH_SPANS",
    "CATEGORIES",
    "DEFAULT_TIMEOUT",
    "MAX_ITEMS",
    "MAX_VALUE_CHARS",
    "SCOPE",
    "TRACES_PATH",
    "UNKNOWN_PROVIDER",
    "OtlpDeliveryFailed",
    "OtlpReport",
    "PlannedSpan",
    "TraceFold",
    "clean",
    "endpoint_url",
    "export_otlp",
    "otlp_json",
    "span_id_of",
    "trace_id_of",
]

#: spans per OTLP request (one line of the file, one POST to the endpoint)
BATCH_SPANS = 512
#: seconds the endpoint gets for one request, retries included (the SDK exporter's deadline)
DEFAULT_TIMEOUT = 10.0
#: `gen_ai.provider.name` when none is given: the log does not record which provider served a request
UNKNOWN_PROVIDER = "unknown"
_PROGRESS_EVERY = 256


@dataclass
class OtlpReport:
    """One run: where to, the [since, until) positions, sessions read, traces and spans per category.

    `errors`: spans with an error status; `requests`: OTLP requests made (file
    lines or POSTs); `open_turns`: turns not closed by `until` (or never
    closed before the next began), not exported; `unplaced`: lines naming a
    turn or request other than the open one, left out; `skipped`: corrupt
    sessions, none of whose spans were exported.
    """

    to: str
    since: int
    until: int
    sessions: int = 0
    traces: int = 0
    spans: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0))
    errors: int = 0
    requests: int = 0
    open_turns: int = 0
    unplaced: int = 0
    skipped: list[Skipped] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"format": "otlp", **asdict(self)}


def export_otlp(
    journal: Any,
    *,
    to: Path | None = None,
    endpoint: str | None = None,
    session: str | None = None,
    since: int | None = None,
    provider: str = UNKNOWN_PROVIDER,
    content: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    progress: Progress | None = None,
    warn: Callable[[str], None] | None = None,
) -> OtlpReport:
    """Export `journal`'s turns (all sessions, or `session`) closing at `since` or later as traces.

    Exactly one of `to` (an OTLP/JSON file, which must not exist) and
    `endpoint` (an OTLP/HTTP URL). Refuses (`ExportRefused`, nothing
    written or sent) a bad target, session id or `since`; raises
    `OtlpDeliveryFailed` when the endpoint does not take a request within
    `timeout` seconds (retries included). Tool arguments and results go into
    the spans only with `content` (their sizes always do).
    """
    if (to is None) == (endpoint is None):
        raise ExportRefused("give one of --to FILE and --otlp-endpoint URL")
    if session is not None:
        validate_session_id(session)
    since = 0 if since is None else since
    if since < 0:
        raise ExportRefused(f"--since must be a position (0 or more), got {since}")
    if not timeout > 0:
        raise ExportRefused(f"--otlp-timeout must be more than 0 seconds, got {timeout}")
    if not provider or len(provider) > 128:
        raise ExportRefused("--gen-ai-provider must be 1 to 128 characters")
    if to is not None:
        _check_file_target(to)
    url = endpoint_url(endpoint) if endpoint is not None else None
    require("opentelemetry.sdk.trace")
    require("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    summaries, until = sessions_to_export(journal, session, since)
    report = OtlpReport(to=str(to) if to is not None else str(url), since=since, until=until)
    sdk = SdkSpans()
    sink: FileSink | EndpointSink = FileSink(to) if to is not None else EndpointSink(str(url), timeout)
    try:
        _run(journal, summaries, report, sdk, sink, provider, content, progress, warn)
        sink.commit()
    except BaseException:
        sink.abort()
        raise
    return report


def _check_file_target(to: Path) -> None:
    if to.is_symlink() or to.exists():
        raise ExportRefused(f"{to} exists: name a new file")
    if not to.parent.is_dir():
        raise ExportRefused(f"{to.parent} is not a directory")


def _run(
    journal: Any,
    summaries: list[Any],
    report: OtlpReport,
    sdk: SdkSpans,
    sink: FileSink | EndpointSink,
    provider: str,
    content: bool,
    progress: Progress | None,
    warn: Callable[[str], None] | None,
) -> None:
    since, until = report.since, report.until
    todo = [s for s in summaries if s.last_seq > 0 and s.last_pos >= since]
    total = 2 * sum(s.last_seq for s in todo)
    done = 0

    def send(spans: list[Any]) -> None:
        sink.send(spans)
        report.requests += 1

    for summary in todo:
        sid = summary.sid
        problem = check_session(journal, sid, until, progress, done, total)  # pass 1
        if problem is not None:
            report.skipped.append(problem)
            if warn is not None:
                warn(f"skipped session {sid}: {problem.error}")
            done += 2 * summary.last_seq
            continue
        done += summary.last_seq
        fold = TraceFold(sid, provider=provider, since=since, content=content)
        for count, record in enumerate(_records(journal, sid, until), 1):  # pass 2: its spans
            for planned in fold.add(record):
                sdk.make(planned)
                report.spans[planned.category] += 1
                report.traces += planned.parent_id is None
                report.errors += planned.error is not None
            while len(sdk.ended) >= BATCH_SPANS:
                send(sdk.take(BATCH_SPANS))
            if progress is not None and count % _PROGRESS_EVERY == 0:
                progress(done + count, total)
        report.open_turns += fold.open_turns + fold.abandoned_turns
        report.unplaced += fold.unplaced
        done += summary.last_seq
        report.sessions += 1
    while sdk.ended:
        send(sdk.take(BATCH_SPANS))
    if progress is not None:
        progress(total, total)


def _records(journal: Any, sid: str, until: int) -> Iterator[Record]:
    for record in journal.read(sid):
        if record.pos >= until:
            return
        yield record
