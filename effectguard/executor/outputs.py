"""What makes an output confirmable, and how it is stored and read back.

A handler that returned did commit its effect: an output that passes the
postcondition confirms the operation even when it cannot be stored (its codec
cannot encode it, or it is over ``max_output_bytes``). The operation is then
CONFIRMED with no stored output and a marker in its evidence, and every caller
gets :class:`~effectguard.errors.OutputNotStored`.
"""

from __future__ import annotations

import logging
import math
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from effectguard.codec_tags import TAGGED, Unstorable, holds_no_tag
from effectguard.contract import EffectContract
from effectguard.errors import ConfigurationError, LedgerIntegrityError
from effectguard.fingerprint import canonical_json, check_json_value
from effectguard.ledger import committed
from effectguard.ledger.protocol import read_commitments
from effectguard.model import EffectStatus, OperationRecord

if TYPE_CHECKING:
    from effectguard.ledger.protocol import EffectLedger

__all__ = [
    "NOT_STORED",
    "Stored",
    "check_replayable",
    "decode",
    "jsonable",
    "not_stored",
    "store",
]

logger = logging.getLogger("effectguard")


#: The key, in a CONFIRMED operation's evidence, that marks its output as not stored.
NOT_STORED = "output_not_stored"


_ENCODE_HINT = (
    "return JSON-encodable values, or annotate the return type (e.g. -> datetime, "
    "a dataclass) so the codec can store them"
)
_SIZE_HINT = "raise the tool's max_output_bytes, or return a smaller output"


@dataclass(frozen=True, slots=True)
class Stored:
    """An output that passed the postcondition: the operation is confirmed.

    ``json`` is None when the output could not be stored (the codec could not
    encode it, or it is over ``max_output_bytes``); ``not_stored`` then says
    where and why, and goes into the ledger row's evidence under
    :data:`NOT_STORED`. The effect happened either way (DESIGN rule 3).
    """

    json: str | None
    provider_operation_id: str | None
    not_stored: Mapping[str, str] | None = None

    @property
    def note(self) -> str | None:
        """The reason recorded on a CONFIRMED operation whose output is not stored."""
        if self.not_stored is None:
            return None
        return f"confirmed, output not stored: {self.not_stored['reason']}"

    def evidence(self, base: Mapping[str, Any]) -> dict[str, Any]:
        """``base``, plus the not-stored marker when there is one."""
        if self.not_stored is None:
            return dict(base)
        return {**base, NOT_STORED: dict(self.not_stored)}


def store(contract: EffectContract, output: Any) -> Stored | str:
    """Return the output's stored form, or why the postcondition refuses to confirm it."""
    if contract.postcondition is not None:
        try:
            holds = bool(contract.postcondition(output))
        except Exception as exc:  # noqa: BLE001 - a failing check is a failed check
            return f"the postcondition raised {type(exc).__name__}: {exc}"
        if not holds:
            return "the output fails the postcondition"
    provider_operation_id = _provider_operation_id(contract, output)
    try:
        codec = TAGGED if contract.codec is None else contract.codec
        encoded = codec.encode(output)
        check_json_value(encoded)  # a caller's value: the tighter nesting limit
        text = canonical_json(encoded)
    except Exception as exc:  # noqa: BLE001 - any encoding failure makes it unstorable
        path, kind = _where(exc, output)
        reason = f"{exc}" if isinstance(exc, Unstorable) else f"{path} cannot be stored: {exc}"
        mark = {"reason": reason, "path": path, "type": kind, "hint": _ENCODE_HINT}
        return Stored(None, provider_operation_id, mark)
    size = len(text.encode("utf-8"))
    if size > contract.max_output_bytes:
        reason = f"the output is {size} bytes, over the {contract.max_output_bytes}-byte limit"
        kind = type(output).__qualname__
        mark = {"reason": reason, "path": "$", "type": kind, "hint": _SIZE_HINT}
        return Stored(None, provider_operation_id, mark)
    return Stored(text, provider_operation_id)


def _where(exc: Exception, output: Any) -> tuple[str, str]:
    """The path and type name an encoding failure is about, as precisely as it says."""
    if isinstance(exc, Unstorable):
        return exc.path, exc.value_type
    text = str(exc)
    if text.startswith("$"):  # canonical_json names the part: "$.when is a datetime, ..."
        path = text.split(" ", 1)[0]
        kind = text.split(" is a ", 1)[1].split(",", 1)[0] if " is a " in text else "?"
        return path, kind
    return "$", type(output).__qualname__


def _provider_operation_id(contract: EffectContract, output: Any) -> str | None:
    provider_operation_id = None
    if contract.provider_operation_id is not None:
        try:
            provider_operation_id = contract.provider_operation_id(output)
        except Exception as exc:  # noqa: BLE001 - the id is a convenience, not the outcome
            logger.warning("provider_operation_id of %r failed: %s", contract.name, exc)
    return provider_operation_id


def not_stored(record: OperationRecord) -> Mapping[str, str] | None:
    """The marker of a CONFIRMED operation whose output could not be stored, else None."""
    if record.status is not EffectStatus.CONFIRMED or record.output_json is not None:
        return None
    mark = record.evidence.get(NOT_STORED)
    return mark if isinstance(mark, Mapping) else None


def decode(
    contract: EffectContract, record: OperationRecord, ledger: EffectLedger | None = None
) -> Any:
    """Return the record's stored output as the contract's codec (or the default) rebuilds it.

    With ``ledger`` (a replay), first checks the stored output is the one its
    confirmation committed to (:func:`check_replayable`).
    """
    if ledger is not None:
        check_replayable(ledger, record)
    data = record.output
    if record.output_json is None or (contract.codec is None and holds_no_tag(record.output_json)):
        return data
    try:
        if contract.codec is None:
            return TAGGED.decode(data)
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


# Per ledger, the (operation id, output digest, provider id) triples already found to be
# what their confirmation committed to: a replay then costs no events read. Bounded, and
# keyed by the stored values, so an edit afterwards is a miss and is checked again.
_CHECKED: weakref.WeakKeyDictionary[object, OrderedDict[tuple[str, str | None, str | None], None]]
_CHECKED = weakref.WeakKeyDictionary()
_CHECKED_MAX = 4096


def check_replayable(ledger: EffectLedger, record: OperationRecord) -> None:
    """Raise LedgerIntegrityError unless ``record``'s output is the one its events committed to.

    Guarantees a replay never returns an output edited in the ledger behind
    effectguard's back. The latest event committing to the output (the
    confirmation, see ``committed.commitments``) holds its digest; an operation
    whose events predate commitments has none, and is replayed as before
    (``verify`` reports it as not covered).
    """
    stored = {
        "output": committed.digest(record.output_json),
        "provider_operation_id": record.provider_operation_id,
    }
    key = (record.operation_id, stored["output"], record.provider_operation_id)
    try:
        seen = _CHECKED.setdefault(ledger, OrderedDict())
    except TypeError:  # a ledger that cannot be weakly referenced: check every time
        seen = OrderedDict()
    if key in seen:
        return
    promised: dict[str, object] = {}
    for commits in read_commitments(ledger, record.operation_id):
        promised.update({name: commits[name] for name in stored if name in commits})
    edited = sorted(name for name, value in promised.items() if stored[name] != value)
    if edited:
        msg = (
            f"operation {record.operation_id!r}: refusing to replay it, its stored "
            f"{' and '.join(edited)} differ from what its confirmation committed to, so the "
            "ledger was edited; run `agent-effect-ops verify` and restore the ledger from a "
            "backup or resolve the operation by hand"
        )
        raise LedgerIntegrityError(msg)
    seen[key] = None
    if len(seen) > _CHECKED_MAX:
        seen.popitem(last=False)
