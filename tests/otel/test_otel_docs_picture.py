"""docs/render_trace.py, the command docs/telemetry.md gives, draws the trace from a real run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from extras_support import import_extra

import_extra("opentelemetry.sdk.trace", "otel")

SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "render_trace.py"


def test_the_picture_is_drawn_from_the_spans_of_a_lost_acknowledgement(tmp_path):
    """Every span and event of the scenario is on the picture; the scenario confirmed once."""
    out = tmp_path / "trace.svg"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    picture = out.read_text(encoding="utf-8")
    assert picture.startswith("<svg ")
    for name in (
        "execute_tool payments.capture",
        "effect payments.capture",
        "POST /v1/captures",
        "GET /v1/captures",
    ):
        assert f">{name}" in picture
    for event in ("claimed", "outcome_unknown", "reconciling", "probe", "confirmed"):
        assert f">{event}</text>" in picture
    assert ">retry</text>" not in picture  # confirmed by the probe: never sent twice
