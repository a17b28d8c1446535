"""``agent-effect-ops export``: operations and their events as JSON lines, for an incident report.

Each operation is one line (``"kind": "operation"``) followed by one line per
event (``"kind": "event"``), in the views ``show --json`` and ``events --json``
print. A file named with ``--output`` is created owner-only and never
overwritten.
"""

from __future__ import annotations

import json
import os
import sys
from typing import IO, TYPE_CHECKING, Any

import click

from effectguard.cli import _ops_views as views
from effectguard.cli._ops_click import LIMIT, OpsError, parse_status, refusals
from effectguard.cli._ops_session import open_ledger

if TYPE_CHECKING:
    from effectguard import EffectStatus

__all__ = ["export"]


def _line(kind: str, data: dict[str, Any]) -> str:
    return json.dumps({"kind": kind, **data}, sort_keys=True, ensure_ascii=True)


def _open(path: str) -> IO[str]:
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as exc:
        msg = f"{path!r} already exists: name a new file (an export never overwrites)"
        raise OpsError(msg) from exc
    except OSError as exc:
        msg = f"cannot create {path!r}: {exc.strerror}"
        raise OpsError(msg) from exc
    return os.fdopen(descriptor, "w", encoding="utf-8")


@click.command(short_help="Write operations and their events as JSON lines.")
@click.option("--status", metavar="STATUS", callback=parse_status, help="Only this status.")
@click.option("--contract", metavar="NAME", help="Only operations of this contract.")
@click.option("--limit", type=LIMIT, default=10_000, show_default=True, metavar="N")
@click.option(
    "--output", "output", metavar="FILE", help="Write to FILE (created 0600), not stdout."
)
def export(
    status: EffectStatus | None, contract: str | None, limit: int, output: str | None
) -> None:
    """Write operations, most recently changed first, each followed by its events, as JSON lines."""
    from effectguard.operator._export import histories  # noqa: PLC0415 - loaded on use

    ledger = open_ledger()
    target = sys.stdout if output is None else _open(output)
    count = 0
    try:
        with refusals():
            for record, events in histories(ledger, status=status, contract=contract, limit=limit):
                target.write(_line("operation", views.record_json(record)) + "\n")
                for event in events:
                    target.write(
                        _line(
                            "event",
                            {"operation_id": record.operation_id, **views.event_json(event)},
                        )
                        + "\n"
                    )
                count += 1
    finally:
        if output is not None:
            target.close()
    if output is not None:
        click.echo(f"exported {count} operations to {output}")
