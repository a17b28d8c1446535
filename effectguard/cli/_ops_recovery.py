"""``agent-effect-ops reprobe`` and ``reconcile``: ask the provider again, write what it proves.

Both only format what :mod:`effectguard.operator` (``recover`` and ``reprobe``)
returns; neither ever dispatches.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import click

from effectguard.cli import _ops_views as views
from effectguard.cli._ops_click import (
    LIMIT,
    OpsUsageError,
    bounded_seconds,
    json_option,
    refusals,
)
from effectguard.cli._ops_session import load_tools, open_ledger, operation, tools_option

_DAY = 86_400.0

if TYPE_CHECKING:
    from effectguard.operator._recover import RecoveryReport, ReprobeOutcome

__all__ = ["reconcile", "reprobe"]

_NO_TOOLS = "--tools MODULE[,MODULE] (or EFFECTGUARD_TOOLS) is needed: the probes live in your code"


def _outcomes_table(outcomes: tuple[ReprobeOutcome, ...]) -> str:
    return views.table(
        ("OPERATION", "BEFORE", "AFTER", "PROBE", "ACTION", "WHY"),
        (
            (
                outcome.operation_id,
                outcome.before.value,
                outcome.after.value,
                outcome.probe.value,
                outcome.action.value,
                outcome.reason,
            )
            for outcome in outcomes
        ),
    )


@click.command(short_help="Run OP's probe now and write what it proves (never dispatches).")
@click.argument("operation_id", metavar="OP")
@tools_option
@click.option("--dry-run", is_flag=True, help="Probe and print what would change; write nothing.")
@json_option
def reprobe(operation_id: str, tools: str | None, dry_run: bool, as_json: bool) -> None:
    """Run operation OP's outcome probe now and apply the reconcile table to its answer.

    COMMITTED confirms it; an authoritative NOT_COMMITTED without overlap risk
    makes it dispatchable by its next call (never a QUARANTINED one); PENDING
    and UNKNOWN leave it. The probe's answer is recorded with your OS account.
    """
    from effectguard.ledger._resolution import os_user  # noqa: PLC0415 - loaded on use
    from effectguard.operator._recover import reprobe as run_reprobe  # noqa: PLC0415 - loaded on use

    index = load_tools(tools)
    if index is None:
        raise OpsUsageError(_NO_TOOLS)
    ledger = open_ledger(write=not dry_run)
    record = operation(ledger, operation_id)
    found = index.find(record.contract, record.contract_version)
    with refusals():
        outcome = run_reprobe(
            ledger,
            record,
            None if found is None else found.contract,  # type: ignore[arg-type]
            actor=f"agent-effect-ops reprobe as {os_user()}",
            dry_run=dry_run,
        )
    if as_json:
        click.echo(views.to_json(outcome.to_json()))
        return
    prefix = "dry run, nothing written: " if dry_run else ""
    click.echo(
        f"{prefix}{operation_id!r} {outcome.before.value} -> {outcome.after.value} "
        f"({outcome.action.value}; probe {outcome.probe.value}: {outcome.reason})"
    )


def _parse_statuses(
    ctx: click.Context,  # noqa: ARG001 - Click's callback signature
    param: click.Parameter,  # noqa: ARG001 - Click's callback signature
    value: str | None,
) -> Any:
    if value is None:
        return None
    from effectguard import EffectStatus  # noqa: PLC0415 - the model is not needed for --help

    try:
        return [EffectStatus.parse(part) for part in value.split(",") if part.strip()]
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


def _print_report(report: RecoveryReport, *, as_json: bool) -> None:
    if as_json:
        click.echo(views.to_json(report.to_json()))
        return
    if report.probed:
        click.echo(_outcomes_table(report.probed))
    for item in report.skipped:
        click.echo(f"skipped {item.operation_id!r} ({item.status.value}): {item.reason}")
    for error in report.errors:
        click.echo(f"error: {error}", err=True)
    label = "would change" if report.dry_run else "changed"
    click.echo(
        f"probed {len(report.probed)}, {label} {len(report.changed)}, "
        f"skipped {len(report.skipped)}, deferred {report.deferred}" + _why_none(report)
    )


def _why_none(report: RecoveryReport) -> str:
    """Why nothing was probed, when nothing was: the next step, in a few words."""
    if report.probed or report.errors:
        return ""
    if report.skipped:
        return " (every candidate was skipped, each for the reason above)"
    if report.deferred:
        return " (each waits out its backoff: run it again later, or reprobe OP)"
    return (
        " (nothing to probe: no operation in these statuses, or none nobody holds;"
        " `list --status all` shows what the ledger holds)"
    )


@click.command(short_help="Re-probe every uncertain operation nobody holds (never dispatches).")
@tools_option
@click.option(
    "--status",
    "statuses",
    metavar="STATUS[,STATUS]",
    callback=_parse_statuses,
    help="Only these (default: outcome-unknown, reconciling, quarantined, abandoned dispatched).",
)
@click.option("--limit", type=LIMIT, default=100, show_default=True, metavar="N")
@click.option(
    "--watch",
    type=float,
    callback=bounded_seconds(0.1, _DAY),
    metavar="SECONDS",
    help="Sweep again every SECONDS until interrupted, backing off per operation.",
)
@click.option("--dry-run", is_flag=True, help="Probe and print what would change; write nothing.")
@json_option
def reconcile(
    tools: str | None,
    statuses: Any,
    limit: int,
    watch: float | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Sweep OUTCOME_UNKNOWN, RECONCILING, QUARANTINED and abandoned DISPATCHED operations.

    Each is re-probed as `reprobe` does, in batches of at most --limit; a
    QUARANTINED one is closed only on COMMITTED evidence. Prints what changed.
    """
    from effectguard.operator._recover import Recoverer  # noqa: PLC0415 - loaded on use

    index = load_tools(tools)
    if index is None:
        raise OpsUsageError(_NO_TOOLS)
    ledger = open_ledger(write=not dry_run)
    with refusals():
        recoverer = Recoverer(ledger, index, statuses=statuses, limit=limit, dry_run=dry_run)
        while True:
            _print_report(recoverer.sweep(), as_json=as_json)
            if watch is None:
                return
            time.sleep(watch)
