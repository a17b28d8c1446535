"""``agent-effect-ops prune``: settled operations older than a cut-off pruned down to tombstones.

Formats what :meth:`~effectguard.ledger.protocol.Prunable.prune` returns; the
rules (only CONFIRMED and REJECTED, a tombstone per operation, the provider's
key retention) are the ledger's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from effectguard.cli import _ops_views as views
from effectguard.cli._ops_click import OpsError, OpsUsageError, json_option, refusals
from effectguard.cli._ops_session import load_tools, open_ledger, tools_option

if TYPE_CHECKING:
    from effectguard import EffectStatus

__all__ = ["parse_duration", "prune"]


def parse_duration(text: str, *, option: str = "--older-than") -> float:
    """Seconds in ``text``: ``30d``, ``12h``, ``90m``, ``45s`` or ``2w``; a usage error if not.

    Read by :func:`effectguard.operator.parse_duration`, as the console reads
    its durations; loaded only when a duration is parsed, so ``--help`` stays cheap.
    """
    from effectguard.operator._durations import parse_duration as read  # noqa: PLC0415 - see above

    try:
        return read(text, field=option)
    except ValueError as exc:
        raise OpsUsageError(str(exc)) from exc


def _statuses(text: str) -> tuple[EffectStatus, ...]:
    from effectguard import EffectStatus  # noqa: PLC0415 - the model is not needed for --help

    try:
        return tuple(EffectStatus.parse(part) for part in text.split(",") if part.strip())
    except ValueError as exc:
        msg = f"--status: {exc}"
        raise OpsUsageError(msg) from exc


@click.command(short_help="Prune settled operations older than a cut-off, leaving tombstones.")
@click.option("--older-than", "older_than", required=True, metavar="DURATION", help="e.g. 30d.")
@click.option(
    "--status",
    "status_text",
    default="CONFIRMED,REJECTED",
    show_default=True,
    metavar="STATUS[,STATUS]",
    help="Only these settled statuses.",
)
@click.option("--archive", metavar="FILE", help="First write what is pruned to FILE (JSON lines).")
@click.option("--dry-run", is_flag=True, help="Print what would be pruned; write nothing.")
@click.option("--force", is_flag=True, help="Prune even while the provider remembers the key.")
@tools_option
@json_option
def prune(
    older_than: str,
    status_text: str,
    archive: str | None,
    dry_run: bool,
    force: bool,
    tools: str | None,
    as_json: bool,
) -> None:
    """Prune CONFIRMED and REJECTED operations last changed longer ago than --older-than.

    Each leaves a tombstone: a later call with its id and the same request
    raises EffectPruned, a different request is a conflict, and neither is
    ever dispatched; verify still checks it. Non-terminal operations are never
    pruned. With --tools, an operation whose contract's provider still
    remembers its key (provider_key_retention_seconds) is kept unless --force.
    """
    seconds = parse_duration(older_than)
    statuses = _statuses(status_text)
    index = load_tools(tools)
    retention = {
        found.contract.name: float(found.contract.provider_key_retention_seconds)
        for found in (index or ())
        if found.contract.provider_key_retention_seconds is not None
    }
    ledger = open_ledger(write=not dry_run)
    pruner = getattr(ledger, "prune", None)
    if pruner is None:
        msg = f"{type(ledger).__name__} cannot prune"
        raise OpsError(msg)
    with refusals():
        report = pruner(
            older_than=seconds,
            statuses=statuses,
            archive=archive,
            dry_run=dry_run,
            force=force,
            key_retention=retention,
        )
    if index is None and not force:
        click.echo("warning: without --tools the providers' key retention is not checked", err=True)
    if as_json:
        data = {"pruned": list(report.pruned), "kept": list(report.kept), "dry_run": dry_run}
        click.echo(views.to_json({**data, "archive": report.archive}))
        return
    verb = "would prune" if dry_run else "pruned"
    prefix = "dry run, nothing written: " if dry_run else ""
    where = f" (archived to {archive})" if archive and not dry_run and report.pruned else ""
    click.echo(f"{prefix}{verb} {len(report.pruned)} operations{where}")
    if report.kept:
        click.echo(
            f"kept {len(report.kept)} whose provider may still remember their key "
            f"(--force prunes them): {', '.join(report.kept[:10])}"
        )
