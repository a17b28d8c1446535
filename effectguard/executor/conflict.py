"""What differs between a stored request and a call that reuses its operation id."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from effectguard.fingerprint import REDACTED, canonical_json, request_fingerprint
from effectguard.model import OperationRecord

__all__ = ["differences"]

#: Longest rendering of one value in a conflict message; longer ones are cut.
_SHOWN = 60


def _show(value: Any) -> str:
    try:
        text = canonical_json(value)
    except TypeError:
        text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


def differences(
    record: OperationRecord,
    *,
    contract: str,
    version: int,
    arguments: Mapping[str, Any],
    provider_key: str | None,
    redact: frozenset[str],
) -> list[str]:
    """Return one line per difference between ``record``'s request and this call's.

    Values are shown only for arguments that are stored unredacted. A redacted
    argument is said to differ only when the fingerprints prove it: the stored
    fingerprint is recomputed from the stored visible values and this call's
    redacted ones, and it no longer matches. Nothing of a redacted value is shown.
    """
    lines: list[str] = []
    if record.contract != contract:
        lines.append(f"contract: stored {record.contract!r}, this call {contract!r}")
    if record.contract_version != version:
        lines.append(f"contract version: stored {record.contract_version}, this call {version}")
    if record.provider_key != provider_key:
        lines.append(f"provider key: stored {record.provider_key!r}, this call {provider_key!r}")
    stored = record.arguments
    lines.extend(_visible_differences(stored, arguments, redact))
    hidden = sorted(name for name in arguments if name in redact)
    if hidden and set(stored) == set(arguments):
        # The stored visible values plus this call's secrets: if that is not the stored
        # fingerprint, a secret must differ (the visible parts are the stored ones).
        mixed = {name: (arguments[name] if name in redact else stored[name]) for name in arguments}
        again = request_fingerprint(
            record.contract, record.contract_version, mixed, record.provider_key, redact
        )
        if again != record.fingerprint:
            lines.append(f"redacted {', '.join(hidden)}: differs (values not shown)")
    return lines


def _visible_differences(
    stored: Mapping[str, Any], arguments: Mapping[str, Any], redact: frozenset[str]
) -> list[str]:
    """One line per argument stored in the clear whose value differs from this call's."""
    lines: list[str] = []
    for name in sorted(set(stored) | set(arguments)):
        if name in redact or stored.get(name) == REDACTED:
            continue
        if name not in stored:
            lines.append(f"{name}: not stored, this call {_show(arguments[name])}")
        elif name not in arguments:
            lines.append(f"{name}: stored {_show(stored[name])}, not in this call")
        elif canonical_json(stored[name]) != canonical_json(arguments[name]):
            shown = f"stored {_show(stored[name])}, this call {_show(arguments[name])}"
            lines.append(f"{name}: {shown}")
    return lines
