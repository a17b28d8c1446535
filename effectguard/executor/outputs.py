"""What makes an output confirmable, and how it is stored and read back."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from effectguard.contract import EffectContract
from effectguard.errors import ConfigurationError
from effectguard.fingerprint import canonical_json
from effectguard.model import OperationRecord

__all__ = ["Stored", "decode", "jsonable", "store"]

logger = logging.getLogger("effectguard")


@dataclass(frozen=True, slots=True)
class Stored:
    """An output that passed the postcondition and fits the ledger."""

    json: str
    provider_operation_id: str | None


def store(contract: EffectContract, output: Any) -> Stored | str:
    """Return the output's stored form, or why it cannot be confirmed."""
    if contract.postcondition is not None:
        try:
            holds = bool(contract.postcondition(output))
        except Exception as exc:  # noqa: BLE001 - a failing check is a failed check
            return f"the postcondition raised {type(exc).__name__}: {exc}"
        if not holds:
            return "the output fails the postcondition"
    try:
        data = contract.codec.encode(output) if contract.codec is not None else output
        text = canonical_json(data)
    except Exception as exc:  # noqa: BLE001 - any encoding failure makes it unstorable
        return f"the output cannot be stored: {exc}"
    size = len(text.encode("utf-8"))
    if size > contract.max_output_bytes:
        return f"the output is {size} bytes, over the {contract.max_output_bytes}-byte limit"
    provider_operation_id = None
    if contract.provider_operation_id is not None:
        try:
            provider_operation_id = contract.provider_operation_id(output)
        except Exception as exc:  # noqa: BLE001 - the id is a convenience, not the outcome
            logger.warning("provider_operation_id of %r failed: %s", contract.name, exc)
    return Stored(text, provider_operation_id)


def decode(contract: EffectContract, record: OperationRecord) -> Any:
    """Return the record's stored output as the contract's codec rebuilds it."""
    data = record.output
    if contract.codec is None or record.output_json is None:
        return data
    try:
        return contract.codec.decode(data)
    except Exception as exc:
        msg = (
            f"operation {record.operation_id!r}: the stored output cannot be decoded by "
            f"contract {contract.name!r}'s codec: {exc}"
        )
        raise ConfigurationError(msg) from exc


def jsonable(evidence: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``evidence`` as a JSON-encodable dict; values without a JSON form become ``repr``.

    Evidence comes from user code (probes, ``EffectRejected``); a ``datetime`` in it
    must never stop an outcome from being recorded.
    """
    try:
        canonical_json(dict(evidence))
    except TypeError:
        return {str(key): _coerce(value) for key, value in evidence.items()}
    return dict(evidence)


def _coerce(value: Any) -> Any:
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, Mapping):
        return {str(key): _coerce(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_coerce(item) for item in value]
    return repr(value)
