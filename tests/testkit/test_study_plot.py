"""The study's chart (the ``study`` extra): a PNG or SVG a team can paste into a review."""

from __future__ import annotations

from click.testing import CliRunner
from extras_support import import_extra

from proofs.study.__main__ import study

matplotlib = import_extra("matplotlib", "study")


def test_study_plot_writes_a_png_and_an_svg(tmp_path):
    """--plot draws the chart in the format its suffix names; the SVG names every strategy."""
    png, svg = tmp_path / "study.png", tmp_path / "study.svg"
    for chart in (png, svg):
        result = CliRunner().invoke(
            study, ["--episodes", "40", "--seed", "3", "--plot", str(chart)]
        )
        assert result.exit_code == 0, result.output
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    text = svg.read_text(encoding="utf-8")
    assert text.lstrip().startswith("<?xml")
    for name in ("naive-retry", "verify-then-retry", "provider-key-only", "effectguard"):
        assert name in text


def test_study_plot_refuses_another_format_before_running(tmp_path):
    """A .pdf chart is bad input: exit 2, nothing written."""
    chart = tmp_path / "study.pdf"
    result = CliRunner().invoke(study, ["--episodes", "5", "--plot", str(chart)])
    assert result.exit_code == 2
    assert "written as .png or .svg" in result.output
    assert not chart.exists()
