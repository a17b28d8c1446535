"""Without the otel extra, or without asking for telemetry, nothing imports OpenTelemetry.

Each check runs in a fresh interpreter, since this test process may have
imported OpenTelemetry for other tests. "Absent" is simulated with an import
hook that refuses every ``opentelemetry`` module, exactly as an environment
without the extra would.
"""

from __future__ import annotations

from otel_script import run_script


def test_without_the_extra_effects_and_the_operator_cli_work_and_import_no_opentelemetry(
    tmp_path,
):
    """Quarantine, an operator's retry from the CLI, the retry confirms: no OpenTelemetry at all.

    Asking for telemetry then fails with one line naming the extra.
    """
    report = run_script(tmp_path, "absent")
    assert report["quarantined"] is True
    assert report["output"]["invoice_id"] == "INV-1"
    assert report["committed"] == 1
    assert report["loaded"] == []
    assert "pip install 'effectguard[otel]'" in report["import_error"]
    assert report["configure_error"].startswith("configure(telemetry=True): ")
    assert "effectguard[otel]" in report["configure_error"]
