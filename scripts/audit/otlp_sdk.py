"""The OTLP export's planned spans made into OpenTelemetry SDK spans, with the ids and times given."""

from __future__ import annotations

import os
from typing import Any

from cairn.audit import require
from cairn.audit.otlp_spans import MAX_VALUE_CHARS, PlannedSpan

#: the instrumentation scope of every span
SCOPE = "cairn.audit.otlp"


class SdkSpans:
    """Makes `PlannedSpan`s into SDK spans (ids preset, times given, limits applied), in batches."""

    def __init__(self) -> None:
        require("opentelemetry.sdk.trace")
        from opentelemetry import trace
        from opentelemetry.context import Context
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, SpanProcessor, TracerProvider
        from opentelemetry.sdk.trace.id_generator import IdGenerator
        from opentelemetry.sdk.trace.sampling import ALWAYS_ON

        class PresetIds(IdGenerator):
            """The ids of the next span, set before it starts (the SDK asks its generator)."""

            trace_id = 0
            span_id = 0

            def generate_trace_id(self) -> int:
                return self.trace_id

            def generate_span_id(self) -> int:
                return self.span_id

        ended: list[ReadableSpan] = []

        class Collect(SpanProcessor):
            def on_end(self, span: ReadableSpan) -> None:
                ended.append(span)

        self._trace = trace
        self._context = Context
        self._ids = PresetIds()
        self.ended = ended
        limits = SpanLimits(
            max_span_attributes=128,
            max_span_attribute_length=MAX_VALUE_CHARS,
            max_attribute_length=MAX_VALUE_CHARS,
            max_events=128,
            max_links=0,
        )
        # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES apply, as for any SDK; else the service is cairn
        resource = Resource.create({})
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": "cairn"}))
        if "service.instance.id" not in _env_resource_keys():  # the SDK's is random: re-exports would differ
            kept = {k: v for k, v in resource.attributes.items() if k != "service.instance.id"}
            resource = Resource(kept, resource.schema_url)
        provider = TracerProvider(
            sampler=ALWAYS_ON,
            resource=resource,
            id_generator=self._ids,
            span_limits=limits,
            shutdown_on_exit=False,
        )
        provider.add_span_processor(Collect())
        self._tracer = provider.get_tracer(SCOPE)
        self._kinds = (trace.SpanKind.INTERNAL, trace.SpanKind.CLIENT)

    def make(self, planned: PlannedSpan) -> None:
        trace = self._trace
        if planned.parent_id is None:
            context = self._context()
        else:
            parent = trace.SpanContext(
                planned.trace_id,
                planned.parent_id,
                is_remote=False,
                trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
            )
            context = trace.set_span_in_context(trace.NonRecordingSpan(parent), self._context())
        self._ids.trace_id, self._ids.span_id = planned.trace_id, planned.span_id
        span = self._tracer.start_span(
            planned.name,
            context=context,
            kind=self._kinds[planned.client],
            attributes=planned.attributes,
            start_time=planned.start_ns,
        )
        if planned.error is not None:
            span.set_status(trace.Status(trace.StatusCode.ERROR, planned.error))
        span.end(end_time=planned.end_ns)

    def take(self, count: int) -> list[Any]:
        """The first `count` ended spans (fewer when fewer ended), removed from the list."""
        spans = self.ended[:count]
        del self.ended[:count]
        return spans


def _env_resource_keys() -> set[str]:
    text = os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    return {item.split("=", 1)[0].strip() for item in text.split(",") if "=" in item}
