"""``agent-effect bench``: what effectguard costs, each cost beside the durable work it adds to.

Prints a table (or, with ``--json``, the JSON report) of: a guarded call
against the same two commits written by hand; a replay against an indexed
read; the decorator against a direct ``execute``; throughput and latency
with 1, 2, 4, 8 threads and 1, 4 processes; 100 asyncio tasks beside 1
thread; operator reads on a large ledger; and the operator CLI's start-up
beside a bare ``import click, sqlite3, json``. Progress goes to stderr. Exit
status: 0 when the run completed, whatever the timings; 1 when a call failed
(a lock error must never happen); 2 when it cannot run as given.
docs/benchmarks.md describes the measurements and the report.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from benchmarks import BenchConfig, BenchError, run_bench
from benchmarks._config import BACKENDS, DEFAULT_OPS
from effectguard import EffectGuardError
from effectguard.cli._reports import INVARIANT_BROKEN, OUTPUT, BadInput, check_output, write_json
from effectguard.cli._signals import cleaned_up_on_sigterm

__all__ = ["bench"]


@click.command()
@click.option(
    "--backend",
    type=click.Choice(BACKENDS),
    default="sqlite",
    show_default=True,
    help="The ledger backend to measure.",
)
@click.option(
    "--ops",
    type=click.IntRange(min=1),
    default=DEFAULT_OPS,
    show_default=True,
    help="Calls per round of each measurement.",
)
@click.option(
    "--rounds",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="Rounds of each measurement; the report gives their median.",
)
@click.option(
    "--ledger-size",
    type=click.IntRange(min=1),
    help="Operations in the large ledger [default: 1,000 per --ops call, at most 1,000,000].",
)
@click.option(
    "--db",
    metavar="PATH|URL",
    help="SQLite: the directory to write in (default: the system's temporary directory). "
    "PostgreSQL: the URL of a database the bench may create schemas in (required).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the JSON report, not the table.")
@click.option("--output", type=OUTPUT, help="Also write the JSON report to this file.")
@click.pass_context
def bench(
    ctx: click.Context,
    backend: str,
    ops: int,
    rounds: int,
    ledger_size: int | None,
    db: str | None,
    as_json: bool,
    output: Path | None,
) -> None:
    """Measure what effectguard costs, each cost beside the durable work it adds to.

    Everything the bench writes (ledger files or PostgreSQL schemas) is removed
    when it ends. Timings never fail a run: the report says which targets were met.
    """
    check_output(output)
    if db is not None and backend == "sqlite" and db.startswith(("postgresql:", "postgres:")):
        msg = f"--db {db} is a PostgreSQL URL; add --backend postgres"
        raise BadInput(msg)
    try:
        config = BenchConfig(backend, ops, rounds, ledger_size, db)
        with cleaned_up_on_sigterm("bench"):
            report = run_bench(config, progress=lambda line: click.echo(f"bench: {line}", err=True))
    except (BenchError, EffectGuardError) as exc:
        raise BadInput(str(exc)) from exc
    document = report.to_json()
    if as_json:
        click.echo(json.dumps(document, indent=2))
    else:
        click.echo("\n".join(report.lines()))
    if output is not None:
        write_json(output, document)
    if not report.ok:
        click.echo(
            f"bench: {report.lock_errors} lock errors and {report.errors} other failed calls",
            err=True,
        )
        ctx.exit(INVARIANT_BROKEN)


if __name__ == "__main__":
    from proofs import run_command

    run_command(bench, "benchmarks")
