"""An operator's resolution of one operation: checked first, previewable, then applied.

The output an operator confirms is read through the contract's codec and
checked against the tool's return annotation before anything is written;
``dry_run`` shows what would be written and writes nothing.
"""

from __future__ import annotations

import collections.abc
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Union

from effectguard._codec import TAGGED
from effectguard._contract import OutputCodec
from effectguard.errors import InvalidRequestError, OperationNotFoundError
from effectguard.ledger import _resolution as resolution
from effectguard.ledger._protocol import Seen

if TYPE_CHECKING:
    from effectguard._decorator import ToolIndex
    from effectguard._model import OperationRecord
    from effectguard.ledger._protocol import EffectLedger

__all__ = ["ACTIONS", "UNCHECKED_OUTPUT", "Resolution", "check_output", "output_problem", "resolve"]


# ---- Whether an operator's output has the type the tool declares ----

_SEQUENCES = (list, tuple, set, frozenset, collections.abc.Sequence, collections.abc.Set)


_MAPPINGS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)


def output_problem(output: Any, annotation: Any, codec: OutputCodec[Any] | None) -> str | None:
    """Return why ``output`` (a JSON value) is not a ``annotation``, or None when it is.

    ``codec`` is the contract's codec (None: the default one), which first
    reads the JSON back into the value a replay would return.
    """
    try:
        value = (TAGGED if codec is None else codec).decode(output)
    except Exception as exc:  # noqa: BLE001 - any decoding failure is the operator's mistake
        plain = _mismatch(output, annotation, "$") if typing.get_origin(annotation) else None
        if plain is not None:  # a container of the wrong kind: say so, not how decoding broke
            return plain
        return f"the output cannot be read as {_name(annotation)}: {type(exc).__name__}: {exc}"
    return _mismatch(value, annotation, "$")


def _name(annotation: Any) -> str:
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__qualname__
    return repr(annotation).replace("typing.", "")


def _kind(value: Any) -> str:
    return "null" if value is None else _a(type(value).__qualname__)


def _a(name: str) -> str:
    return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"


def _mismatch(value: Any, annotation: Any, path: str) -> str | None:  # noqa: C901, PLR0911 - one branch per kind of annotation
    if annotation in (Any, object):
        return None
    if annotation is None or annotation is type(None):
        return None if value is None else f"{path} is {_kind(value)}, not null"
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _mismatch(value, args[0], path)
    if origin in (Union, types.UnionType):
        if any(_mismatch(value, arm, path) is None for arm in args):
            return None
        return f"{path} is {_kind(value)}, not {_name(annotation)}"
    if origin is Literal:
        return None if value in args else f"{path} is {value!r}, not one of {list(args)!r}"
    if typing.is_typeddict(annotation):
        return _typed_dict(value, annotation, path)
    if origin in _MAPPINGS or annotation in _MAPPINGS:
        return _mapping(value, args, path)
    if origin in _SEQUENCES or annotation in _SEQUENCES:
        return _sequence(value, origin or annotation, args, path)
    if isinstance(annotation, type):
        if annotation is float and isinstance(value, int) and not isinstance(value, bool):
            return None
        if isinstance(value, annotation):
            return None
        return f"{path} is {_kind(value)}, not {_a(_name(annotation))}"
    return None


def _mapping(value: Any, args: tuple[Any, ...], path: str) -> str | None:
    if not isinstance(value, collections.abc.Mapping):
        return f"{path} is {_kind(value)}, not an object"
    if len(args) == 2:  # noqa: PLR2004 - a mapping's key and value types
        for key, item in value.items():
            problem = _mismatch(key, args[0], f"{path} key") or _mismatch(
                item, args[1], f"{path}.{key}"
            )
            if problem:
                return problem
    return None


def _sequence(value: Any, kind: Any, args: tuple[Any, ...], path: str) -> str | None:
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, set, frozenset)):
        return f"{path} is {_kind(value)}, not an array"
    items = list(value)
    if kind is tuple and args and args[-1] is not Ellipsis:
        if len(items) != len(args):
            return f"{path} has {len(items)} items, not {len(args)}"
        pairs = list(zip(items, args, strict=True))
    else:
        item_type = args[0] if args else Any
        pairs = [(item, item_type) for item in items]
    for index, (item, item_type) in enumerate(pairs):
        problem = _mismatch(item, item_type, f"{path}[{index}]")
        if problem:
            return problem
    return None


def _typed_dict(value: Any, annotation: Any, path: str) -> str | None:
    if not isinstance(value, collections.abc.Mapping):
        return f"{path} is {_kind(value)}, not an object"
    missing = sorted(set(annotation.__required_keys__) - set(value))
    if missing:
        return f"{path} lacks the key(s) {', '.join(missing)}"
    hints = typing.get_type_hints(annotation)
    for key, item in value.items():
        if key in hints:
            problem = _mismatch(item, hints[key], f"{path}.{key}")
            if problem:
                return problem
    return None


# ---- An operator's resolution, checked and previewable ----

Action = Literal["confirm", "reject", "authorize-retry", "approve", "deny"]


#: The resolutions :func:`resolve` performs: of an uncertain operation, then of a request
#: awaiting approval.
ACTIONS: tuple[Action, ...] = ("confirm", "reject", "authorize-retry", "approve", "deny")


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
    from effectguard.operator._resolve import output_problem  # noqa: PLC0415 - see above

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
    expected: Seen | None = None,
    output_from: Mapping[str, Any] | None = None,
    expires_in: float | None = None,
) -> Resolution:
    """Confirm, reject or authorize a retry of ``operation_id``, checked first (see the module).

    ``expected`` is the state the operator decided on (the event count and
    chain head ``show`` prints); the resolution lands on exactly that state or
    not at all. Raises what the ledger's resolution raises (an unknown
    operation, a state the action makes no sense in, a live lease,
    :class:`~effectguard.errors.OperationChangedError` when the operation
    moved on or another write won the race), and
    :class:`~effectguard.errors.InvalidRequestError` for a mismatched output;
    nothing is written in any of those cases, nor in a dry run. ``output_from``
    (a confirmation's output not typed by the operator, as
    :func:`~effectguard.operator.output_from_probe` gives it) is recorded with it.
    ``expires_in`` (seconds) bounds an approval: unused by then, it is void.
    """
    if action not in ACTIONS:
        msg = f"unknown resolution {action!r}; choose {', '.join(ACTIONS)}"
        raise InvalidRequestError(msg)
    before = ledger.get(operation_id)
    if before is None:
        raise OperationNotFoundError(operation_id)
    if expected is not None and not expected.matches(before):
        raise resolution.changed(operation_id, resolution.described(expected), before)
    # The state read here is the one decided on, whatever the operator gave.
    seen = Seen.of(before)
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
            expected=seen,
            output_from=output_from,
            **audit,
        )
    elif action == "reject":
        after = resolution.reject(ledger, operation_id, dry_run=dry_run, expected=seen, **audit)
    elif action == "approve":
        after = resolution.approve(
            ledger, operation_id, expires_in=expires_in, dry_run=dry_run, expected=seen, **audit
        )
    elif action == "deny":
        after = resolution.deny(ledger, operation_id, dry_run=dry_run, expected=seen, **audit)
    else:
        after = resolution.authorize_retry(
            ledger, operation_id, dry_run=dry_run, expected=seen, **audit
        )
    return Resolution(action, before, after, written=not dry_run, warnings=warnings)
