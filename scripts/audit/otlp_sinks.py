"""Where the OTLP export goes: an OTLP/JSON file, or an OTLP/HTTP endpoint through the SDK's exporter."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from cairn.audit.export import ExportRefused
from cairn.events.errors import CairnError

TRACES_PATH = "/v1/traces"


class OtlpDeliveryFailed(CairnError):
    """The OTLP endpoint did not accept a request within the timeout (exit 2)."""


def otlp_json(request: Any) -> str:
    """One `ExportTraceServiceRequest` as an OTLP/JSON line: protobuf's JSON mapping, ids as hex."""
    from google.protobuf import json_format

    data = json_format.MessageToDict(request, use_integers_for_enums=True)
    for resource in data.get("resourceSpans", ()):
        for scope in resource.get("scopeSpans", ()):
            for span in scope.get("spans", ()):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = _b64_to_hex(span[key])
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def _b64_to_hex(text: str) -> str:
    import base64

    return base64.b64decode(text).hex()


class FileSink:
    """OTLP/JSON lines into a temporary file beside `path`, moved into place by `commit`."""

    def __init__(self, path: Path) -> None:
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

        self._encode = encode_spans
        self.path = path
        self.tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        self._handle = open(self.tmp, "x", encoding="utf-8")  # noqa: SIM115 (closed by commit/abort)

    def send(self, spans: list[Any]) -> None:
        self._handle.write(otlp_json(self._encode(spans)))
        self._handle.write("\n")

    def commit(self) -> None:
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self._handle.close()
        if self.path.exists() or self.path.is_symlink():
            raise ExportRefused(f"{self.path} appeared while exporting: not replacing it")
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        self._handle.close()
        with contextlib.suppress(FileNotFoundError):
            self.tmp.unlink()


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


class EndpointSink:
    """OTLP/HTTP protobuf requests to `url` with the SDK's exporter (bounded by `timeout`)."""

    _LOGGER = "opentelemetry.exporter.otlp"

    def __init__(self, url: str, timeout: float) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        self.url = url
        self._exporter = OTLPSpanExporter(endpoint=url, timeout=timeout)
        self.sent = 0

    def send(self, spans: list[Any]) -> None:
        from opentelemetry.sdk.trace.export import SpanExportResult

        logger = logging.getLogger(self._LOGGER)
        capture = _Capture()
        propagate = logger.propagate
        logger.addHandler(capture)
        logger.propagate = False  # the reason goes into the error, not onto stderr as a log line
        try:
            result = self._exporter.export(spans)
        finally:
            logger.removeHandler(capture)
            logger.propagate = propagate
        if result is not SpanExportResult.SUCCESS:
            reason = "; ".join(capture.messages[-2:]) or "no reason given"
            raise OtlpDeliveryFailed(
                f"{self.url} did not take a request of {len(spans)} spans ({reason}); "
                f"{self.sent} spans were delivered before it: exporting again sends the same ids"
            )
        self.sent += len(spans)

    def commit(self) -> None:
        self._exporter.shutdown()  # type: ignore[no-untyped-call]

    def abort(self) -> None:
        self._exporter.shutdown()  # type: ignore[no-untyped-call]


def endpoint_url(url: str) -> str:
    """The traces URL of `url`: `http(s)://host[:port]` gets `/v1/traces`; a URL with a path is kept."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ExportRefused(f"--otlp-endpoint must be an http:// or https:// URL with a host, got {url!r}")
    try:
        parts.port  # noqa: B018 (parsing the port checks it)
    except ValueError:
        raise ExportRefused(f"--otlp-endpoint has a bad port: {url!r}") from None
    if parts.path in ("", "/"):
        parts = parts._replace(path=TRACES_PATH)
    return urlunsplit(parts)


# --- the run -------------------------------------------------------------------------------
