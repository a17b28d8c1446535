"""Outputs: which a ledger may confirm, how they are stored, and how a replay reads them back.

A replay returns the output its confirmation committed to, decoded by the
contract's codec, or raises :class:`~effectguard.errors.OutputNotStored`; the
replay cache holds only records that were verified that way.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from effectguard._codec import TAGGED, Unstorable, holds_no_tag
from effectguard._contract import EffectContract
from effectguard._executor._observe import Observer, Transition, listening, notify
from effectguard._fingerprint import (
    MAX_JSON_DEPTH,
    canonical_json,
    check_json_value,
    checked_json,
    read_json,
)
from effectguard._model import EffectResult, EffectStatus, OperationRecord, frozen_builder
from effectguard.errors import ConfigurationError, LedgerIntegrityError
from effectguard.ledger import _chain as committed
from effectguard.ledger._protocol import ReplayView, read_commitments, watch_prunes

if TYPE_CHECKING:
    from effectguard.ledger._protocol import EffectLedger

__all__ = [
    "DEFAULT_REPLAY_CACHE",
    "NOT_STORED",
    "ReplayCache",
    "Stored",
    "cached_replay",
    "check_replayable",
    "check_stored_output",
    "decode",
    "decode_text",
    "jsonable",
    "not_stored",
    "store",
]


# ---- What makes an output confirmable and storable, and how a replay reads it back ----

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
    provider_operation_id = (
        None if contract.provider_operation_id is None else _provider_operation_id(contract, output)
    )
    if contract.codec is None and _plain(output, MAX_JSON_DEPTH):
        # The default codec returns plain data as it is and check_json_value passes it, so
        # its text is the same; unless a key may be a tag ("$..."): then the general path.
        text = checked_json(output)
        if "$" not in text and len(text) <= contract.max_output_bytes:  # ASCII: chars = bytes
            return Stored(text, provider_operation_id)
    try:
        codec = TAGGED if contract.codec is None else contract.codec
        encoded = codec.encode(output)
        check_json_value(encoded)  # a caller's value: the tighter nesting limit
        text = checked_json(encoded)  # checked just above
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


_PLAIN_SCALARS = frozenset({int, bool, type(None)})


def _plain(value: Any, depth: int) -> bool:  # noqa: PLR0911 - one return per kind, no frames
    """True when ``value`` is JSON data the default codec keeps as it is, and valid.

    Exact dicts with ASCII ``str`` keys and exact lists (no tuple: the codec
    tags it), ``depth`` levels deep at most, of ASCII ``str``, ``int``,
    ``bool``, None and finite ``float``. False sends the value the general way.
    """
    kind = type(value)
    if kind is dict:
        if depth <= 0:
            return False
        for key in value:  # a loop, not all(<generator>): no frame per dict
            if type(key) is not str or not key.isascii():
                return False
        return _plain_items(value.values(), depth - 1)
    if kind is list:
        return depth > 0 and _plain_items(value, depth - 1)
    if kind is str:
        return bool(value.isascii())
    if kind is float:
        return math.isfinite(value)
    return kind in _PLAIN_SCALARS


def _plain_items(items: Iterable[Any], depth: int) -> bool:
    """:func:`_plain` of every item; an ASCII str, the commonest, checked in place."""
    for item in items:
        if type(item) is str:
            if not item.isascii():
                return False
        elif type(item) not in _PLAIN_SCALARS and not _plain(item, depth):
            return False
    return True


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


def _unstored(replay: OperationRecord | ReplayView) -> bool:
    """Whether ``replay`` is CONFIRMED with its output marked as not stored."""
    if replay.status is not EffectStatus.CONFIRMED or replay.output_json is not None:
        return False
    return isinstance(replay.evidence.get(NOT_STORED), Mapping)


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
    return decode_text(contract, record.operation_id, record.output_json)


def decode_text(contract: EffectContract, operation_id: str, output_json: str | None) -> Any:
    """Return the output stored as ``output_json``, as the contract's codec rebuilds it."""
    if output_json is None:
        return None
    data = read_json(output_json)
    if contract.codec is None and holds_no_tag(output_json):
        return data
    try:
        if contract.codec is None:
            return TAGGED.decode(data)
        return contract.codec.decode(data)
    except Exception as exc:
        msg = (
            f"operation {operation_id!r}: the stored output cannot be decoded by "
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


def check_replayable(
    ledger: EffectLedger, record: OperationRecord, last_commits: str | None = None
) -> None:
    """Raise LedgerIntegrityError unless ``record``'s output is the one its events committed to.

    Guarantees a replay never returns an output edited in the ledger behind
    effectguard's back. The latest event committing to the output (the
    confirmation) holds its digest. ``last_commits`` is the JSON text of the
    commitments of ``record``'s last event, when the read brought them: the
    confirmation almost always, so nothing more is read. An operation whose
    events predate commitments has none, and is replayed as before (``verify``
    reports it as not covered).
    """
    check_stored_output(
        ledger, record.operation_id, record.output_json, record.provider_operation_id, last_commits
    )


def check_stored_output(
    ledger: EffectLedger,
    operation_id: str,
    output_json: str | None,
    provider_operation_id: str | None,
    last_commits: str | None,
) -> None:
    """:func:`check_replayable` of an operation's stored output and provider id, given as values."""
    stored = {
        "output": committed.digest(output_json),
        "provider_operation_id": provider_operation_id,
    }
    key = (operation_id, stored["output"], provider_operation_id)
    try:
        seen = _CHECKED.get(ledger)
        if seen is None:
            seen = _CHECKED.setdefault(ledger, OrderedDict())
    except TypeError:  # a ledger that cannot be weakly referenced: check every time
        seen = OrderedDict()
    if key in seen:
        return
    promised: dict[str, object] = {}
    last = read_json(last_commits) if last_commits else None
    if isinstance(last, dict) and all(name in last for name in stored):
        promised = {name: last[name] for name in stored}
    else:
        for commits in read_commitments(ledger, operation_id):
            promised.update({name: commits[name] for name in stored if name in commits})
    edited = sorted(name for name, value in promised.items() if stored[name] != value)
    if edited:
        msg = (
            f"operation {operation_id!r}: refusing to replay it, its stored "
            f"{' and '.join(edited)} differ from what its confirmation committed to, so the "
            "ledger was edited; run `agent-effect-ops verify` and restore the ledger from a "
            "backup or resolve the operation by hand"
        )
        raise LedgerIntegrityError(msg)
    seen[key] = None
    if len(seen) > _CHECKED_MAX:
        seen.popitem(last=False)


# ---- The replay cache: verified terminal records kept per executor ----

#: Terminal operations an executor keeps for replay unless told otherwise.
DEFAULT_REPLAY_CACHE = 10_000


_SCALARS = frozenset({str, int, float, bool, type(None)})


_new_result = frozen_builder(EffectResult)


@dataclass(frozen=True, slots=True)
class _Entry:
    """What a cached replay returns of one terminal operation, whose output passed its check."""

    status: EffectStatus
    fingerprint: str
    attempts: int
    output_json: str | None
    provider_operation_id: str | None
    reason: str | None
    # Each replay gets its own copy of the evidence, as from a ledger read, so a caller
    # that mutates its result's evidence cannot change what later callers see: a flat
    # mapping of scalars is copied with dict(); anything nested is kept as JSON.
    evidence_flat: dict[str, Any] | None
    evidence_json: str | None

    def evidence(self) -> dict[str, Any]:
        if self.evidence_flat is not None:
            return dict(self.evidence_flat)
        return {} if self.evidence_json is None else dict(json.loads(self.evidence_json))

    @classmethod
    def of(cls, replay: OperationRecord | ReplayView) -> _Entry:
        evidence = dict(replay.evidence)
        flat = all(type(value) in _SCALARS for value in evidence.values())
        return cls(
            replay.status,
            replay.fingerprint,
            replay.attempts,
            replay.output_json,
            replay.provider_operation_id,
            replay.reason,
            evidence if flat else None,
            None if flat else json.dumps(evidence),
        )


class ReplayCache:
    """At most ``size`` verified terminal records of one ledger, least recently replayed evicted.

    Safe to share between threads. A ``size`` of 0 keeps nothing: every
    replay reads the ledger.
    """

    def __init__(self, size: int) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            msg = (
                f"EffectExecutor(): replay_cache must be a whole number of operations >= 0 "
                f"(0 disables it), not {size!r}"
            )
            raise ConfigurationError(msg)
        self.size = size
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        if size:
            watch_prunes(self)

    def __len__(self) -> int:
        return len(self._entries)

    def replay(self, operation_id: str, fingerprint: str) -> _Entry | None:
        """The cached replay of ``operation_id`` if it was claimed for ``fingerprint``, else None.

        A different fingerprint is a miss, so that the caller reads the ledger
        and raises the conflict from the stored record, exactly as without a cache.
        """
        if not self.size:
            return None
        with self._lock:
            entry = self._entries.get(operation_id)
            if entry is None or entry.fingerprint != fingerprint:
                return None
            self._entries.move_to_end(operation_id)
        return entry

    def remember(self, replay: OperationRecord | ReplayView) -> None:
        """Keep ``replay`` if it is terminal with a stored output (or none to store).

        Only an operation a replay has just read and checked belongs here. A
        CONFIRMED operation whose output was not stored is not kept: its
        replays read the ledger each time, as they always have.
        """
        if not self.size or not replay.status.terminal or _unstored(replay):
            return
        entry = _Entry.of(replay)
        with self._lock:
            self._entries[replay.operation_id] = entry
            self._entries.move_to_end(replay.operation_id)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def forget(self, operation_id: str) -> None:
        """Drop ``operation_id``, so its next replay reads the ledger (unknown ids: no-op)."""
        with self._lock:
            self._entries.pop(operation_id, None)

    def clear(self) -> None:
        """Drop every entry."""
        with self._lock:
            self._entries.clear()

    def replay_result(
        self,
        contract: EffectContract,
        operation_id: str,
        fingerprint: str,
        observers: tuple[Observer, ...],
    ) -> EffectResult[Any] | None:
        """See :func:`cached_replay`."""
        return cached_replay(self, contract, operation_id, fingerprint, observers)


def cached_replay(
    cache: ReplayCache,
    contract: EffectContract,
    operation_id: str,
    fingerprint: str,
    observers: tuple[Observer, ...],
) -> EffectResult[Any] | None:
    """The replay of a terminal operation ``cache`` holds for ``fingerprint``, else None.

    No ledger read and no step of the state machine: the result is built from
    the cache's entry, and ``observers`` hear of it (the log observer only when
    replays are logged). None: the call runs the machine, which reads the ledger.
    """
    entry = cache.replay(operation_id, fingerprint)
    if entry is None:
        return None
    status = entry.status
    result: EffectResult[Any] = _new_result(
        status,
        operation_id,
        decode_text(contract, operation_id, entry.output_json)
        if status is EffectStatus.CONFIRMED
        else None,
        entry.provider_operation_id,
        entry.attempts,
        True,  # noqa: FBT003 - positional fields
        entry.evidence(),
        entry.reason,
        None,
    )
    observers = listening(observers, None, status, final=True, replayed=True)
    if observers:
        notify(observers, Transition.of_result(contract.name, contract.version, result))
    return result
