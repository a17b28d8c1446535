"""``agent-effect-ops export``: operations and their events as JSON lines, for an incident report.

Each operation is one line (``"kind": "operation"``) followed by one line per
event (``"kind": "event"``), in the views ``show --json`` and ``events --json``
print. A file named with ``--output`` is created owner-only and never
overwritten. With ``--sign-key`` a last ``signature`` line signs every line
before it with an Ed25519 key (``agent-effect-ops keygen`` makes one), so
``verify --archive FILE --public-key PUB`` can later prove the file unedited
and the ledger still holding what it says.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import click

from effectguard.cli import _ops_views as views
from effectguard.cli._ops_click import LIMIT, OpsError, OpsUsageError, parse_status, refusals
from effectguard.cli._ops_session import open_ledger

if TYPE_CHECKING:
    from effectguard import EffectStatus

__all__ = ["export", "keygen", "read_key"]


def _line(kind: str, data: dict[str, Any]) -> str:
    return json.dumps({"kind": kind, **data}, sort_keys=True, ensure_ascii=True)


def _open(path: str, mode: int = 0o600, what: str = "an export") -> IO[str]:
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError as exc:
        msg = f"{path!r} already exists: name a new file ({what} never overwrites)"
        raise OpsError(msg) from exc
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "the name contains a NUL byte"
        msg = f"cannot create {path!r}: {why}"
        raise OpsError(msg) from exc
    return os.fdopen(descriptor, "w", encoding="utf-8")


def read_key(path: str, option: str) -> bytes:
    """The bytes of the key file ``path`` named by ``option``; one line if it cannot be read."""
    try:
        with open(path, "rb") as file:  # noqa: PTH123 - a path from the command line
            return file.read(1 << 16)
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "the name contains a NUL byte"
        msg = f"cannot read {option} {path!r}: {why}"
        raise OpsUsageError(msg) from exc


@click.command(short_help="Write operations and their events as JSON lines.")
@click.option("--status", metavar="STATUS", callback=parse_status, help="Only this status.")
@click.option("--contract", metavar="NAME", help="Only operations of this contract.")
@click.option("--limit", type=LIMIT, default=10_000, show_default=True, metavar="N")
@click.option(
    "--output", "output", metavar="FILE", help="Write to FILE (created 0600), not stdout."
)
@click.option(
    "--sign-key",
    "sign_key",
    metavar="KEY",
    help="Sign the export with the Ed25519 private key in KEY (see keygen).",
)
def export(
    status: EffectStatus | None,
    contract: str | None,
    limit: int,
    output: str | None,
    sign_key: str | None,
) -> None:
    """Write operations, most recently changed first, each followed by its events, as JSON lines.

    With --sign-key, a last line signs every line before it and the ledger's
    claims anchor at this moment: 'verify --archive FILE --public-key PUB'
    then fails on any edit, deletion, reordering or truncation of the file,
    and on a ledger that no longer holds what was exported.
    """
    from effectguard.operator._export import histories  # noqa: PLC0415 - loaded on use

    signer = None
    if sign_key is not None:  # before anything is opened or written: a bad key writes nothing
        from effectguard.operator import _signing as signing  # noqa: PLC0415 - loaded on use

        with refusals():
            signer = signing.Signer(
                signing.load_private_key(read_key(sign_key, "--sign-key"), sign_key)
            )
    ledger = open_ledger()
    target = sys.stdout if output is None else _open(output)
    count = 0

    def write(text: str) -> None:
        target.write(text + "\n" if signer is None else signer.line(text))

    try:
        with refusals():
            anchor = None
            if signer is not None:
                # Read first: whatever is claimed later is outside what the export signs.
                head = getattr(ledger, "anchor_head", None)
                anchor = None if head is None else head()
            for record, events in histories(ledger, status=status, contract=contract, limit=limit):
                write(_line("operation", views.record_json(record)))
                for event in events:
                    data = {"operation_id": record.operation_id, **views.event_json(event)}
                    write(_line("event", data))
                count += 1
            if signer is not None:
                exported_at = datetime.now(UTC).isoformat()
                target.write(signer.signature_line(anchor, exported_at))
    finally:
        if output is not None:
            target.close()
    if output is not None:
        signed = "" if signer is None else f", signed with key {signer.key_id}"
        click.echo(f"exported {count} operations to {output}{signed}")


@click.command(short_help="Make an Ed25519 key pair for signed exports.")
@click.option(
    "--private-key", "private_path", required=True, metavar="FILE", help="Write it here (0600)."
)
@click.option(
    "--public-key", "public_path", required=True, metavar="FILE", help="Write it here (0644)."
)
def keygen(private_path: str, public_path: str) -> None:
    """Write a new Ed25519 key pair: export --sign-key takes the private key, verify the public.

    Neither file is ever overwritten. Keep the private key where the ledger's
    writers cannot read it: whoever holds it can sign a forged export.
    """
    from effectguard.operator import _signing as signing  # noqa: PLC0415 - loaded on use

    if os.path.realpath(private_path) == os.path.realpath(public_path):
        msg = "--private-key and --public-key name the same file: name two"
        raise OpsError(msg)
    with refusals():
        private, public = signing.generate_key_pair()
        name = signing.key_id(signing.load_public_key(public, "the new key"))
    for path in (private_path, public_path):
        if os.path.lexists(path):
            msg = f"{path!r} already exists: name a new file (keygen never overwrites a key)"
            raise OpsError(msg)
    with _open(private_path, 0o600, "keygen") as file:
        file.write(private.decode("ascii"))
    try:
        with _open(public_path, 0o644, "keygen") as file:
            file.write(public.decode("ascii"))
    except BaseException:
        Path(private_path).unlink()  # half a key pair is no key pair
        raise
    click.echo(f"wrote key {name}: private {private_path} (0600), public {public_path}")
