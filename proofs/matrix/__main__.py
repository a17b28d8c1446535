"""The fault matrix, from a checkout: ``python -m proofs.matrix --episodes 1000 --seed 7``.

Exit status: 0 when every invariant held; 1 on any duplicate effect, lost
confirmation or fault without its expected outcome (and, with workers, when
they never contended); 2 for bad input.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from effectguard import EffectGuardError
from effectguard.cli._progress import progress_on_stderr
from effectguard.cli._reports import INVARIANT_BROKEN, OUTPUT, BadInput, check_output, write_json
from effectguard.cli._signals import cleaned_up_on_sigterm
from proofs import run_command
from proofs.matrix import MatrixReport, run_matrix
from proofs.matrix.site import Backend


@click.command()
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


if __name__ == "__main__":
    run_command(matrix, "proofs.matrix")
