"""``agent-effect``: run failure scenarios and the fault matrix against fake providers.

Exit status: 0 when every invariant held; 1 when a scenario's invariant broke
or the matrix found a duplicate effect or a lost confirmation; 2 for bad
input (nothing is recorded then). ``cli`` is the Click group: other commands
attach to it with ``cli.add_command``.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

import click

from effectguard import __version__
from effectguard.cli._progress import progress_on_stderr
from effectguard.cli._reports import (
    INVARIANT_BROKEN,
    OUTPUT,
    BadInput,
    check_output,
    write_json,
)
from effectguard.cli._signals import cleaned_up_on_sigterm
from effectguard.cli.bench import bench
from effectguard.cli.study import study
from effectguard.errors import EffectGuardError
from effectguard.testkit.matrix import MatrixReport, run_matrix
from effectguard.testkit.matrix.site import Backend
from effectguard.testkit.scenarios import SCENARIOS, ScenarioError, run_scenario

__all__ = ["cli", "main"]


@click.group(
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.option(
    "--scenario",
    "scenario_name",
    type=click.Choice(list(SCENARIOS)),
    metavar="NAME",
    help="Run one scenario (see --list).",
)
@click.option("--list", "list_scenarios", is_flag=True, help="List the scenarios and exit.")
@click.option("--output", type=OUTPUT, help="Write the scenario's JSON report to this file.")
@click.option(
    "--db",
    type=click.Path(dir_okay=False, path_type=Path),
    help="SQLite ledger file to record into (default: a temporary file).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the scenario's data.")
@click.version_option(__version__, prog_name="agent-effect")
@click.pass_context
def cli(
    ctx: click.Context,
    scenario_name: str | None,
    list_scenarios: bool,
    output: Path | None,
    db: Path | None,
    seed: int,
) -> None:
    """Prove, against fake providers that count what they commit, that effects happen once.

    Run a scenario with --scenario NAME, list them with --list, or run the
    randomized fault matrix with the matrix command.
    """
    if ctx.invoked_subcommand is not None:
        if scenario_name or list_scenarios or output or db:
            msg = "--scenario, --list, --output and --db cannot be combined with a command"
            raise click.UsageError(msg)
        return
    if list_scenarios:
        _list_scenarios(scenario_name)
        return
    if scenario_name is None:
        seeded = ctx.get_parameter_source("seed") is not click.core.ParameterSource.DEFAULT
        if output or db or seeded:
            msg = "--output, --db and --seed need --scenario NAME"
            raise click.UsageError(msg)
        click.echo(ctx.get_help())
        return
    check_output(output)
    try:
        report = run_scenario(scenario_name, seed=seed, db=db)
    except (ScenarioError, EffectGuardError) as exc:
        raise BadInput(str(exc)) from exc
    click.echo(report.summary())
    if output is not None:
        write_json(output, report.to_json())
    if not report.invariant_held:
        ctx.exit(INVARIANT_BROKEN)


def _list_scenarios(scenario_name: str | None) -> None:
    if scenario_name:
        msg = "--list and --scenario cannot be combined"
        raise click.UsageError(msg)
    width = max(len(name) for name in SCENARIOS)
    for scenario in SCENARIOS.values():
        click.echo(f"{scenario.name.ljust(width)}  {scenario.summary}")


@cli.command()
@click.option(
    "--episodes",
    type=click.IntRange(min=1),
    default=300,
    show_default=True,
    help="How many episodes to run.",
)
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Seed the episodes are drawn from."
)
@click.option(
    "--backend",
    type=click.Choice(Backend.ALL),
    default=Backend.SQLITE,
    show_default=True,
    help="The ledger: a SQLite file in a temporary directory, or a schema in --db.",
)
@click.option(
    "--db",
    metavar="URL",
    help="With --backend postgres: the database to run in (a schema of its own, dropped after).",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Processes making every call round together, contending for the same operations.",
)
@click.option("--output", type=OUTPUT, help="Write the JSON report (every episode) to this file.")
@click.option(
    "--broken-contract",
    is_flag=True,
    help="Break the guaranteed-key contract on purpose (a new key per request, still "
    "declared guaranteed) to show that the matrix catches the duplicates.",
)
@click.pass_context
def matrix(
    ctx: click.Context,
    episodes: int,
    seed: int,
    backend: str,
    db: str | None,
    workers: int,
    output: Path | None,
    broken_contract: bool,
) -> None:
    """Run seeded episodes across contract kinds x faults x crash points; count what went wrong.

    Exits 1 on any duplicate effect, lost confirmation or fault without its
    expected outcome, and, with --workers above 1, when the workers never
    contended. Progress goes to standard error.
    """
    check_output(output)
    started = time.monotonic()
    try:
        with (
            cleaned_up_on_sigterm("matrix"),
            progress_on_stderr("matrix episodes", episodes) as progress,
        ):
            report = run_matrix(
                episodes,
                seed,
                broken_contract=broken_contract,
                progress=progress,
                backend=backend,
                db=db,
                workers=workers,
            )
    except EffectGuardError as exc:
        raise BadInput(str(exc)) from exc
    elapsed = time.monotonic() - started
    click.echo(report.table())
    click.echo(_contention(report))
    click.echo(_verdict(report, elapsed))
    failed = report.failed_episodes
    click.echo(f"matrix: {report.total.episodes - failed} passed, {failed} failed")
    if output is not None:
        write_json(output, report.to_json())
    if not report.ok:
        ctx.exit(INVARIANT_BROKEN)


def _contention(report: MatrixReport) -> str:
    total = report.total
    line = (
        f"contention ({report.workers} worker{'s' if report.workers > 1 else ''}, "
        f"{report.backend}): {total.takeovers} takeovers ({total.lease_expiries} after a lease "
        f"expired), {total.fenced} fenced-out writes, {total.met_live_lease} calls met a live lease"
    )
    if report.workers > 1 and not report.contended:
        line += "; the workers never contended, so this run proves nothing about concurrency"
    return line


def _verdict(report: MatrixReport, elapsed: float) -> str:
    total = report.total
    broken = " (contract deliberately broken)" if report.broken_contract else ""
    outcome = "OK" if report.ok else "FAILED"
    unexpected = total.unexpected
    missed = f"; {unexpected} faults without their expected outcome" if unexpected else ""
    chains = "" if report.ledger_verified else "; the ledger's event chains do NOT verify"
    return (
        f"{outcome}{broken}: {total.episodes} episodes (seed {report.seed}) in {elapsed:.1f}s: "
        f"{total.duplicate_effects} duplicate effects, {total.lost_confirmations} lost "
        f"confirmations, {total.needlessly_quarantined} needless quarantines{missed}{chains}"
    )


cli.add_command(bench)
cli.add_command(study)


def main() -> None:
    """Run ``agent-effect``.

    Scenarios, the matrix and the bench make effects fail on purpose, so the
    library's own log lines (which would otherwise reach stderr through Python's
    last-resort handler) are shown only from the level ``EFFECTGUARD_LOG_LEVEL``
    names, ERROR by default.
    """
    level = os.environ.get("EFFECTGUARD_LOG_LEVEL", "ERROR").upper()
    if level not in logging.getLevelNamesMapping():
        sys.stderr.write(f"agent-effect: EFFECTGUARD_LOG_LEVEL={level!r} is not a logging level\n")
        sys.exit(2)
    # This is the application, not the library: it may configure logging.
    logging.basicConfig(format="%(name)s %(levelname)s %(message)s")
    logging.getLogger("effectguard").setLevel(level)
    cli(prog_name="agent-effect")
