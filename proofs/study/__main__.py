"""``agent-effect study``: what each way of calling a tool costs under the same seeded faults.

Prints a table (or, with ``--json``, the JSON report; with ``--plot``, also a
chart) of duplicate effects,
lost work, operator tickets and provider calls per strategy (naive retry,
verify then retry, provider key only, effectguard) and fault kind, counted
by the destination itself. Progress goes to stderr. Exit status: 0 when
effectguard's row shows no duplicate and the naive baseline shows some; 1
otherwise (a study whose baseline never fails proves nothing); 2 for bad
input. docs/study.md describes the strategies and the numbers.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from effectguard import ConfigurationError
from effectguard.cli._progress import progress_on_stderr
from effectguard.cli._reports import (
    INVARIANT_BROKEN,
    OUTPUT,
    BadInput,
    check_output,
    write_json,
)
from proofs.study import Strategy, StudyReport, run_study
from proofs.study.plot import FORMATS, plot

__all__ = ["study"]


@click.command()
@click.option(
    "--episodes",
    type=click.IntRange(min=1),
    default=500,
    show_default=True,
    help="Episodes, each played through every strategy.",
)
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Seed the episodes are drawn from."
)
@click.option("--json", "as_json", is_flag=True, help="Print the JSON report, not the table.")
@click.option("--output", type=OUTPUT, help="Also write the JSON report to this file.")
@click.option(
    "--plot",
    "chart",
    type=OUTPUT,
    help="Also draw the chart to this .png or .svg file (needs effectguard[study]).",
)
@click.pass_context
def study(
    ctx: click.Context,
    episodes: int,
    seed: int,
    as_json: bool,
    output: Path | None,
    chart: Path | None,
) -> None:
    """Play the same seeded faults through four ways of calling a tool; count what each cost.

    Exits 1 if effectguard duplicated an effect, or if the naive baseline never did.
    """
    check_output(output)
    check_output(chart)
    if chart is not None and chart.suffix.lower() not in FORMATS:
        msg = f"--plot {chart}: the chart is written as {' or '.join(FORMATS)}, by its suffix"
        raise BadInput(msg)
    with progress_on_stderr("study episodes", episodes) as progress:
        report = run_study(episodes, seed, progress=progress)
    document = report.to_json()
    if as_json:
        click.echo(json.dumps(document, indent=2))
    else:
        click.echo(report.table())
        click.echo(_verdict(report))
    if output is not None:
        write_json(output, document)
    if chart is not None:
        try:
            plot(report, chart)
        except ConfigurationError as exc:
            raise BadInput(str(exc)) from exc
        except OSError as exc:
            msg = f"cannot write the chart to {chart}: {exc.strerror or exc}"
            raise BadInput(msg) from exc
    if not report.ok:
        ctx.exit(INVARIANT_BROKEN)


def _verdict(report: StudyReport) -> str:
    guarded = report.costs[Strategy.EFFECTGUARD.value]["total"]
    naive = report.costs[Strategy.NAIVE.value]["total"]
    outcome = "OK" if report.ok else "FAILED"
    return (
        f"{outcome}: {report.episodes} episodes (seed {report.seed}): effectguard "
        f"{guarded.duplicates} duplicates, {guarded.lost} lost, {guarded.tickets} tickets; "
        f"naive retry {naive.duplicates} duplicates, {naive.lost} lost"
    )


if __name__ == "__main__":
    from proofs import run_command

    run_command(study, "proofs.study")
