"""configure(telemetry=True) on the global providers; an operator's CLI action as a span.

Runs in a fresh interpreter: OpenTelemetry's global providers can be set once per process.
"""

from __future__ import annotations

from extras_support import import_extra

import_extra("opentelemetry.sdk.trace", "otel")
import_extra("effectguard.otel", "otel")

from otel_script import run_script  # noqa: E402 - imported once the extra is known to be installed


def test_with_the_extra_installed_nothing_imports_it_unless_asked(tmp_path):
    """The whole run with OpenTelemetry importable: still not imported, since no one asked."""
    report = run_script(tmp_path, "installed")
    assert report["committed"] == 1
    assert report["loaded"] == []
    assert "import_error" not in report
    assert "configure_error" not in report


def test_an_operators_retry_from_the_cli_is_a_span_between_the_two_calls(tmp_path):
    """Quarantine, `agent-effect-ops authorize-retry`, the retry: the human step is a span.

    It carries actor, action and reason; awaiting-operator goes up once and back down.
    """
    report = run_script(tmp_path, "traced")
    spans = report["spans"]
    names = [span["name"] for span in spans if not span["name"].startswith("execute_tool")]
    assert names == [
        "effect payments.capture",
        "operator operator_retry_authorized",
        "effect payments.capture",
    ]
    first, operator, retried = (s for s in spans if not s["name"].startswith("execute_tool"))
    assert first["attributes"]["error.type"] == "effectguard.quarantined"
    assert operator["attributes"] == {
        "effectguard.operation.id": "invoice:INV-1",
        "effectguard.contract.name": "payments.capture",
        "effectguard.operator.action": "operator_retry_authorized",
        "effectguard.operator.actor": "ana",
        "effectguard.reason": "provider says no capture",
        "effectguard.operator.evidence_reference": "T-1",
        "effectguard.from_status": "QUARANTINED",
        "effectguard.to_status": "PREPARED",
        "effectguard.attempt": 1,
    }
    assert retried["attributes"]["effectguard.status"] == "CONFIRMED"
    assert report["awaiting"] == [
        [{"effectguard.contract.name": "payments.capture", "effectguard.status": "QUARANTINED"}, 0]
    ]
    assert report["committed"] == 1


def test_an_operators_retry_from_the_console_is_a_span_too(tmp_path):
    """The same human step through the console's form: the same span, the counter back to 0."""
    import_extra("starlette", "console")
    report = run_script(tmp_path, "console")
    assert report["posted"] == 303
    [operator] = [s for s in report["spans"] if s["name"].startswith("operator ")]
    assert operator["name"] == "operator operator_retry_authorized"
    assert operator["attributes"]["effectguard.operator.actor"] == "ana"
    assert operator["attributes"]["effectguard.from_status"] == "QUARANTINED"
    assert report["awaiting"] == [
        [{"effectguard.contract.name": "payments.capture", "effectguard.status": "QUARANTINED"}, 0]
    ]
    assert report["committed"] == 1
