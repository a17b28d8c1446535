"""An operator's resolution as the console receives it: parsed, checked, then applied.

The console writes only through the ledger's audited operator API
(``confirm``, ``reject``, ``authorize_retry``), so its resolutions obey exactly
the rules, and leave exactly the audit trail, of ``agent-effect-ops``. A form
that is incomplete or malformed is refused before the ledger is touched.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from effectguard.errors import EffectGuardError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from effectguard.ledger import EffectLedger
    from effectguard.model import OperationRecord

__all__ = ["ACTIONS", "Resolution", "ResolutionRefused", "parse_resolution", "resolve"]

#: What an operator can do to an operation, as the CLI names the commands.
ACTIONS = ("confirm", "reject", "authorize-retry")


class ResolutionRefused(Exception):
    """The ledger refused the resolution; the message is one line and nothing was written."""


@dataclass(frozen=True, slots=True)
class Resolution:
    """One operator decision about one operation, with its audit fields."""

    action: str
    operation_id: str
    reason: str
    evidence_reference: str
    output: Any = None
    provider_operation_id: str | None = None


def parse_resolution(form: Mapping[str, str]) -> Resolution:
    """Return the resolution a form describes; a ``ValueError`` names all that is missing."""
    action = form.get("action", "")
    if action not in ACTIONS:
        msg = f"unknown action {action!r}: use one of {', '.join(ACTIONS)}"
        raise ValueError(msg)
    fields = {
        name: form.get(name, "").strip()
        for name in ("operation_id", "reason", "evidence_reference")
    }
    required = list(fields)
    if action == "confirm":
        required += ["output_json", "provider_operation_id"]
        fields["output_json"] = form.get("output_json", "").strip()
        fields["provider_operation_id"] = form.get("provider_operation_id", "").strip()
    missing = [name.replace("_", " ") for name in required if not fields[name]]
    if missing:
        msg = f"{action} needs: {', '.join(missing)}"
        raise ValueError(msg)
    output = None
    if action == "confirm":
        output = _json(fields["output_json"])
    return Resolution(
        action=action,
        operation_id=fields["operation_id"],
        reason=fields["reason"],
        evidence_reference=fields["evidence_reference"],
        output=output,
        provider_operation_id=fields.get("provider_operation_id"),
    )


def _json(text: str) -> Any:
    def refuse(constant: str) -> Any:
        msg = f"{constant} is not a JSON number"
        raise ValueError(msg)

    try:
        return json.loads(text, parse_constant=refuse)
    except RecursionError as exc:
        msg = "the output is not storable JSON: it is nested too deeply"
        raise ValueError(msg) from exc
    except ValueError as exc:
        msg = f"the output is not valid JSON: {exc}"
        raise ValueError(msg) from exc


def resolve(ledger: EffectLedger, resolution: Resolution, *, actor: str) -> OperationRecord:
    """Apply ``resolution`` as ``actor``; :class:`ResolutionRefused` when the ledger refuses it."""
    audit = {
        "actor": actor,
        "reason": resolution.reason,
        "evidence_reference": resolution.evidence_reference,
    }
    try:
        if resolution.action == "confirm":
            return ledger.confirm(
                resolution.operation_id,
                output=resolution.output,
                provider_operation_id=resolution.provider_operation_id,
                **audit,
            )
        if resolution.action == "reject":
            return ledger.reject(resolution.operation_id, **audit)
        return ledger.authorize_retry(resolution.operation_id, **audit)
    except EffectGuardError as exc:
        raise ResolutionRefused(str(exc)) from exc
