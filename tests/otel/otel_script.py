"""A fresh interpreter running effects and the operator CLI, for the import and CLI tests.

The script quarantines a capture (no probe, failed before commit), lets an
operator authorize a retry through ``agent-effect-ops`` in-process (or, in
mode ``console``, through the operator console's form), calls
again (the retry confirms), and prints a JSON report: what the provider
committed, which ``opentelemetry`` modules were loaded, and, when asked, the
spans and metric points an in-memory SDK received.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

_SCRIPT = textwrap.dedent(
    """
    import importlib.abc, json, sys

    class Absent(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "opentelemetry" or name.startswith("opentelemetry."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    ledger, mode = sys.argv[1], sys.argv[2]
    if mode == "absent":
        sys.meta_path.insert(0, Absent())
    traced = mode in ("traced", "console")
    if traced:
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )

        exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))

    import effectguard
    from effectguard.cli.ops import main
    from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan

    provider = FakePaymentProvider(
        idempotency_guaranteed=False, faults=FaultPlan([Fault.FAIL_BEFORE_COMMIT])
    )
    report = {}
    with effectguard.configure(ledger, telemetry=traced):

        @effectguard.effect(operation_id="invoice:{invoice_id}", name="payments.capture")
        def capture(invoice_id: str, amount_cents: int) -> dict:
            return provider.capture(invoice_id, amount_cents)

        try:
            capture("INV-1", 100)
        except effectguard.EffectQuarantined:
            report["quarantined"] = True
        if mode == "console":
            import re
            from starlette.testclient import TestClient
            from effectguard.console import ConsoleSettings, create_app
            from effectguard.console.security import COOKIE

            with effectguard.open_ledger(ledger) as opened:
                settings = ConsoleSettings(ledger=opened, token="t" * 32, actor="ana")
                with TestClient(create_app(settings), follow_redirects=False) as client:
                    client.cookies.set(COOKIE, "t" * 32)
                    page = client.get("/operation", params={"id": "invoice:INV-1"}).text
                    form = dict(re.findall(
                        r'name="(csrf|expect_events|expect_head)" value="([0-9a-f]+)"', page
                    ))
                    posted = client.post("/resolve", data={
                        **form, "operation_id": "invoice:INV-1", "action": "authorize-retry",
                        "reason": "provider says no capture", "evidence_reference": "T-1",
                        "submit": "apply",
                    })
                    report["posted"] = posted.status_code
        else:
            main(
                ["--db", ledger, "authorize-retry", "invoice:INV-1", "--actor", "ana",
                 "--reason", "provider says no capture", "--evidence-reference", "T-1"],
                standalone_mode=False,
            )
        report["output"] = capture("INV-1", 100)
    report["committed"] = provider.committed()
    report["loaded"] = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
    if traced:
        report["spans"] = [
            {
                "name": span.name,
                "attributes": dict(span.attributes),
                "events": [event.name for event in span.events],
            }
            for span in exporter.get_finished_spans()
        ]
        report["awaiting"] = [
            (dict(point.attributes), point.value)
            for resource in reader.get_metrics_data().resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == "effectguard.operations.awaiting_operator"
            for point in metric.data.data_points
        ]
    else:
        try:
            import effectguard.otel
        except ImportError as exc:
            report["import_error"] = str(exc)
        try:
            effectguard.configure(ledger, telemetry=True)
        except effectguard.ConfigurationError as exc:
            report["configure_error"] = str(exc)
    print(json.dumps(report))
    """
)


def run_script(tmp_path: Path, mode: str) -> dict:
    """Run the script in ``mode`` (absent, installed, traced, console); return its report."""
    script = tmp_path / "run.py"
    script.write_text(_SCRIPT, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "ledger.db"), mode],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])
