"""An operator's resolution as the console receives it: parsed, checked, then applied.

The console writes only through the functions ``agent-effect-ops`` uses
(:mod:`effectguard.operator`, its re-probe included), so its resolutions obey exactly the
rules, checks and dry runs, and leave exactly the audit trail, of the CLI. A
form that is incomplete or malformed is refused before the ledger is touched.
An approval's "expires in" is read as the CLI reads ``--expires-in``
(:func:`effectguard.operator.parse_approval_duration`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from effectguard import operator as operator_actions
from effectguard.errors import EffectGuardError
from effectguard.ledger import Seen

if TYPE_CHECKING:
    from collections.abc import Mapping

    from effectguard._decorator import ToolIndex
    from effectguard._model import OperationRecord
    from effectguard.ledger import EffectLedger
    from effectguard.operator._recover import ProbedOutput, ReprobeOutcome

__all__ = [
    "ACTIONS",
    "APPROVAL_ACTIONS",
    "Resolution",
    "ResolutionRefused",
    "parse_resolution",
    "probe_output",
    "reprobe",
    "resolve",
]

#: What an operator can do to an operation, as the CLI names the commands.
ACTIONS = operator_actions.ACTIONS

#: The decisions about a request awaiting approval; the others settle an uncertain outcome.
APPROVAL_ACTIONS = ("approve", "deny")


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
    #: The state the decision was made on: the event count and chain head the page showed.
    expect_events: int | None = None
    expect_head: str | None = None
    #: For an approval: seconds it may wait for its call before it is void (None: no limit).
    expires_in: float | None = None


def parse_resolution(form: Mapping[str, str]) -> Resolution:
    """Return the resolution a form describes, or raise a one-line ``ValueError``.

    The message names everything missing at once. ``confirm`` needs an
    output (JSON) and the provider's id; ``approve`` and ``deny`` need no
    output, and only ``approve`` takes ``expires_in`` (``30m``, ``2h``,
    ``1d``; empty for no limit), which any other action refuses rather
    than ignores. Every action needs the state it was decided on.
    """
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
        # The provider's id may be left empty: a provider without ids for its effects (a
        # probe that found the effect but no id) is confirmed with none, as the ledger allows.
        required += ["output_json"]
        fields["output_json"] = form.get("output_json", "").strip()
        fields["provider_operation_id"] = form.get("provider_operation_id", "").strip()
    missing = [name.replace("_", " ") for name in required if not fields[name]]
    if missing:
        msg = f"{action} needs: {', '.join(missing)}"
        raise ValueError(msg)
    output = None
    if action == "confirm":
        output = _json(fields["output_json"])
    expires_in = _expires_in(action, form.get("expires_in", ""))
    events, head = form.get("expect_events", "").strip(), form.get("expect_head", "").strip()
    if not events.isdigit() or len(events) > _MAX_COUNT_DIGITS or not head:
        msg = (
            "the form does not say which state of the operation it was decided on: reload the page"
        )
        raise ValueError(msg)
    return Resolution(
        action=action,
        operation_id=fields["operation_id"],
        reason=fields["reason"],
        evidence_reference=fields["evidence_reference"],
        output=output,
        provider_operation_id=fields.get("provider_operation_id") or None,
        expect_events=int(events),
        expect_head=head,
        expires_in=expires_in,
    )


def _expires_in(action: str, text: str) -> float | None:
    """An approval's expiry in seconds from the form's text; None when left empty."""
    if not text.strip():
        return None
    if action != "approve":
        msg = f"expires in applies only to approve, not to {action}: clear it"
        raise ValueError(msg)
    return operator_actions.parse_approval_duration(text, field="expires in")


_MAX_COUNT_DIGITS = 18


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


def resolve(
    ledger: EffectLedger,
    resolution: Resolution,
    *,
    actor: str,
    tools: ToolIndex | None = None,
    dry_run: bool = False,
) -> operator_actions.Resolution:
    """Apply (or, with ``dry_run``, preview) ``resolution`` as ``actor``.

    The same checks as ``agent-effect-ops``: with ``tools``, a confirmation's
    output must fit the tool's return type. :class:`ResolutionRefused` when
    the ledger or a check refuses it; nothing is written then.
    """
    try:
        return operator_actions.resolve(
            ledger,
            resolution.operation_id,
            resolution.action,  # type: ignore[arg-type]  # checked by parse_resolution
            actor=actor,
            reason=resolution.reason,
            evidence_reference=resolution.evidence_reference,
            output=resolution.output,
            provider_operation_id=resolution.provider_operation_id,
            tools=tools,
            dry_run=dry_run,
            expected=Seen(resolution.expect_events, resolution.expect_head),
            expires_in=resolution.expires_in,
        )
    except EffectGuardError as exc:
        raise ResolutionRefused(str(exc)) from exc


def reprobe(
    ledger: EffectLedger, operation_id: str, tools: ToolIndex, *, actor: str, dry_run: bool
) -> ReprobeOutcome:
    """Run the operation's probe now, as ``agent-effect-ops reprobe`` does; never dispatches."""
    from effectguard.operator._recover import reprobe as run_reprobe  # noqa: PLC0415 - on use

    try:
        record = ledger.get(operation_id)
        if record is None:
            msg = f"no operation {operation_id!r} in the ledger"
            raise ResolutionRefused(msg)
        found = tools.find(record.contract, record.contract_version)
        return run_reprobe(
            ledger,
            record,
            None if found is None else found.contract,  # type: ignore[arg-type]  # refused inside
            actor=actor,
            dry_run=dry_run,
        )
    except EffectGuardError as exc:
        raise ResolutionRefused(str(exc)) from exc


def probe_output(
    ledger: EffectLedger, operation_id: str, tools: ToolIndex
) -> tuple[OperationRecord, ProbedOutput]:
    """The operation as read, and the output its probe holds now; never writes or dispatches."""
    try:
        record = ledger.get(operation_id)
        if record is None:
            msg = f"no operation {operation_id!r} in the ledger"
            raise ResolutionRefused(msg)
        found = tools.find(record.contract, record.contract_version)
        contract = None if found is None else found.contract
        return record, operator_actions.output_from_probe(record, contract)
    except EffectGuardError as exc:
        raise ResolutionRefused(str(exc)) from exc
