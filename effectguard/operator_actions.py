"""What an operator does to one operation, checked and previewed before anything is written.

The command line (``agent-effect-ops``) and any other console call these and
only format what comes back, so the rules are written once:

- a confirmation's output is checked against the tool's declared return type
  through its contract's codec (:func:`effectguard.output_shape.output_problem`)
  when the tool is known, and refused with a one-line error otherwise it is
  accepted with a warning that it is unchecked;
- every resolution can be a dry run, which checks the same rules and returns
  the record before and as it would be after, writing nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from effectguard.errors import InvalidRequestError, OperationNotFoundError
from effectguard.ledger import resolution

if TYPE_CHECKING:
    from effectguard.decorator.discovery import ToolIndex
    from effectguard.ledger.protocol import EffectLedger
    from effectguard.model import OperationRecord

__all__ = ["ACTIONS", "UNCHECKED_OUTPUT", "Resolution", "check_output", "resolve"]

Action = Literal["confirm", "reject", "authorize-retry"]
#: The resolutions :func:`resolve` performs.
ACTIONS: tuple[Action, ...] = ("confirm", "reject", "authorize-retry")
#: The warning given when a confirmation's output cannot be checked (no tools given).
UNCHECKED_OUTPUT = (
    "the output is unchecked: without the tool (--tools MODULE) nothing verifies it has "
    "the type the tool returns, and every later call replays it as is"
)


@dataclass(frozen=True, slots=True)
class Resolution:
    """An operator resolution: the record before and after, and whether it was written.

    In a dry run ``after`` is the record as the resolution would leave it.
    """

    action: Action
    before: OperationRecord
    after: OperationRecord
    written: bool
    warnings: tuple[str, ...] = ()


def check_output(record: OperationRecord, output: Any, tools: ToolIndex) -> None:
    """Refuse ``output`` unless the tool of ``record``'s contract could have returned it.

    Raises :class:`~effectguard.errors.InvalidRequestError` naming the
    mismatch, or naming the contract when none of ``tools`` is its tool.
    """
    # Loaded only here: the codecs are not needed to reject or authorize a retry.
    from effectguard.output_shape import output_problem  # noqa: PLC0415 - see above

    found = tools.find(record.contract, record.contract_version)
    if found is None:
        msg = (
            f"no tool of contract {record.contract!r} version {record.contract_version} "
            "among the tools given: name the module that defines it"
        )
        raise InvalidRequestError(msg)
    problem = output_problem(output, found.returns, found.contract.codec)
    if problem is not None:
        msg = (
            f"the output does not match what {found.where}() returns: {problem}; "
            "nothing was written"
        )
        raise InvalidRequestError(msg)


def resolve(
    ledger: EffectLedger,
    operation_id: str,
    action: Action,
    *,
    actor: str,
    reason: str,
    evidence_reference: str,
    output: Any = None,
    provider_operation_id: str | None = None,
    tools: ToolIndex | None = None,
    dry_run: bool = False,
) -> Resolution:
    """Confirm, reject or authorize a retry of ``operation_id``, checked first (see the module).

    Raises what the ledger's resolution raises (an unknown operation, a state
    the action makes no sense in, a live lease), and
    :class:`~effectguard.errors.InvalidRequestError` for a mismatched output;
    nothing is written in any of those cases, nor in a dry run.
    """
    if action not in ACTIONS:
        msg = f"unknown resolution {action!r}; choose {', '.join(ACTIONS)}"
        raise InvalidRequestError(msg)
    before = ledger.get(operation_id)
    if before is None:
        raise OperationNotFoundError(operation_id)
    warnings: tuple[str, ...] = ()
    audit = {"actor": actor, "reason": reason, "evidence_reference": evidence_reference}
    if action == "confirm":
        if tools is None:
            warnings = (UNCHECKED_OUTPUT,)
        else:
            check_output(before, output, tools)
        after = resolution.confirm(
            ledger,
            operation_id,
            output=output,
            provider_operation_id=provider_operation_id,
            dry_run=dry_run,
            **audit,
        )
    elif action == "reject":
        after = resolution.reject(ledger, operation_id, dry_run=dry_run, **audit)
    else:
        after = resolution.authorize_retry(ledger, operation_id, dry_run=dry_run, **audit)
    return Resolution(action, before, after, written=not dry_run, warnings=warnings)
