"""Draw docs/images/telemetry-trace.svg from the real spans of one lost-acknowledgement call.

Run from the repository root (needs the ``otel`` extra and ``opentelemetry-sdk``)::

    python docs/render_trace.py

The scenario is the one effectguard exists for: the provider commits a
capture, the acknowledgement is lost (the handler sees a timeout), the probe
finds the capture, and the call is confirmed without a second request. The
handler and the probe each open a span of their own, as an HTTP client's
instrumentation would, with a short sleep standing in for the network. The
spans come from the SDK's in-memory exporter; the SVG is written by hand, so
drawing it needs nothing else.
"""

from __future__ import annotations

import logging
import sys
import tempfile
import time
from html import escape
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from effectguard import EffectContract, EffectExecutor, open_ledger
from effectguard.otel import instrument
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan

OUT = Path(__file__).resolve().parent / "images" / "telemetry-trace.svg"
WIDTH, LEFT, RIGHT, ROW, TOP = 960, 250, 30, 34, 64
_NETWORK = 0.03  # seconds the fake network takes per request


def lost_acknowledgement_spans() -> list[ReadableSpan]:
    """Run one capture whose acknowledgement is lost; return its spans, outermost first."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    http = provider.get_tracer("http-client")
    payments = FakePaymentProvider(idempotency_guaranteed=False, faults=FaultPlan([Fault.LOSE_ACK]))

    def capture(arguments: Any, *, idempotency_key: str | None) -> Any:
        with http.start_as_current_span("POST /v1/captures"):
            time.sleep(_NETWORK)
            return payments.handler(arguments, idempotency_key=idempotency_key)

    def find_capture(arguments: Any, *, idempotency_key: str | None) -> Any:
        with http.start_as_current_span("GET /v1/captures?idempotency_key=…"):
            time.sleep(_NETWORK / 2)
            return payments.probe(arguments, idempotency_key=idempotency_key)

    contract = EffectContract(
        name="payments.capture",
        operation_id=lambda a: f"invoice:{a['invoice_id']}:capture",
        provider_idempotency_key=lambda a: f"capture:{a['invoice_id']}",
        outcome_probe=find_capture,
        provider_operation_id=lambda output: output["id"],
    )
    with tempfile.TemporaryDirectory() as directory:
        ledger = open_ledger(Path(directory) / "ledger.db")
        executor = EffectExecutor(ledger)
        with instrument(executor, tracer_provider=provider):
            result = executor.execute(
                contract, {"invoice_id": "INV-1042", "amount_cents": 1999}, capture
            )
        ledger.close()
    if not result.confirmed or payments.committed() != 1:
        msg = f"the scenario went wrong: {result.status}, {payments.committed()} captures"
        raise RuntimeError(msg)
    return sorted(exporter.get_finished_spans(), key=lambda span: span.start_time or 0)


def _depth(span: ReadableSpan, by_id: dict[int, ReadableSpan]) -> int:
    depth = 0
    while span.parent is not None and span.parent.span_id in by_id:
        span = by_id[span.parent.span_id]
        depth += 1
    return depth


def svg(spans: list[ReadableSpan]) -> str:
    """A timeline: one bar per span, indented by depth, with each span event as a tick."""
    start = min(span.start_time or 0 for span in spans)
    end = max(span.end_time or 0 for span in spans)
    scale = (WIDTH - LEFT - RIGHT) / max(end - start, 1)
    by_id = {span.context.span_id: span for span in spans}
    height = TOP + ROW * len(spans) + 150
    out = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
            f'font-family="sans-serif" font-size="12">'
        ),
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
        (
            '<text x="10" y="22" font-size="15" font-weight="bold">One lost acknowledgement, '
            "as exported: confirmed by the probe, one capture</text>"
        ),
        (
            f'<text x="10" y="42" fill="#555">{(end - start) / 1e6:.1f} ms in all; '
            "ticks are span events; regenerate with: python docs/render_trace.py</text>"
        ),
    ]
    labels: list[tuple[float, str]] = []
    for row, span in enumerate(spans):
        y = TOP + row * ROW
        x0 = LEFT + ((span.start_time or 0) - start) * scale
        x1 = LEFT + ((span.end_time or 0) - start) * scale
        ours = span.instrumentation_scope is not None and (
            span.instrumentation_scope.name == "effectguard"
        )
        colour = "#2b6cb0" if ours else "#9c9c9c"
        indent = 10 + 14 * _depth(span, by_id)
        out.append(f'<text x="{indent}" y="{y + 16}">{escape(span.name)}</text>')
        out.append(
            f'<rect x="{x0:.1f}" y="{y + 4}" width="{max(x1 - x0, 1.5):.1f}" height="16" '
            f'rx="3" fill="{colour}"/>'
        )
        for event in span.events:
            x = LEFT + (event.timestamp - start) * scale
            out.append(
                f'<line x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + 24}" '
                'stroke="#c05621" stroke-width="2"/>'
            )
            labels.append((x, event.name))
    base = TOP + ROW * len(spans) + 12
    for index, (x, name) in enumerate(sorted(labels)):
        y = base + 18 * (index % 6)
        out.append(
            f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{y - 4}" stroke="#c05621" '
            'stroke-opacity="0.25"/>'
        )
        anchor = 'text-anchor="end" ' if x > WIDTH - 160 else ""
        shift = -3 if anchor else 3
        out.append(
            f'<text {anchor}x="{x + shift:.1f}" y="{y + 8}" fill="#c05621">{escape(name)}</text>'
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    """Write the SVG to the path given, or to docs/images/telemetry-trace.svg."""
    logging.getLogger("effectguard").setLevel(logging.ERROR)  # the lost ack's warning is expected
    target = Path(argv[1]) if len(argv) > 1 else OUT
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(svg(lost_acknowledgement_spans()), encoding="utf-8")
    sys.stdout.write(f"wrote {target}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
