"""An in-memory OpenTelemetry SDK for the telemetry tests: finished spans and metric points."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


@dataclass
class Telemetry:
    """An SDK tracer and meter provider whose output stays in memory."""

    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader

    @classmethod
    def make(cls) -> Telemetry:
        """Fresh providers, spans exported as each ends, metrics read on demand."""
        exporter = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
        reader = InMemoryMetricReader()
        return cls(tracer_provider, MeterProvider(metric_readers=[reader]), exporter, reader)

    def spans(self) -> list[ReadableSpan]:
        """Every finished span, in the order they ended."""
        return list(self.exporter.get_finished_spans())

    def named(self, prefix: str) -> list[ReadableSpan]:
        """The finished spans whose name starts with ``prefix``."""
        return [span for span in self.spans() if span.name.startswith(prefix)]

    def points(self, metric: str) -> list[tuple[dict[str, Any], Any]]:
        """(attributes, value) of each point of ``metric``: a sum's value, a histogram's count."""
        data = self.reader.get_metrics_data()
        found = []
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for item in scope.metrics:
                    if item.name != metric:
                        continue
                    for point in item.data.data_points:
                        value = getattr(point, "value", None)
                        if value is None:
                            value = point.count
                        found.append((dict(point.attributes), value))
        return found

    def shutdown(self) -> None:
        """Shut both providers down."""
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


def events(span: ReadableSpan) -> list[str]:
    return [event.name for event in span.events]


def event(span: ReadableSpan, name: str, index: int = 0) -> dict[str, Any]:
    return [dict(e.attributes or {}) for e in span.events if e.name == name][index]


def everything_said(span: ReadableSpan) -> str:
    """Every string a span exports: name, attributes, events, status, links and resource."""
    return span.to_json()
