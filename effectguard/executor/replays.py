"""The replay cache: terminal results served from memory, the fingerprint checked on every call.

CONFIRMED and REJECTED never change (DESIGN.md, "Replay cache"), so once a
replay has read a terminal record from the ledger and checked its output
against the commitment of its confirmation, a later replay of the same
operation in this process may be built from that record without reading the
ledger again.

Why memory cannot go stale across processes: nothing changes a terminal
record. The executor's own writes expect a non-terminal status, a late
handler's return only adds evidence-only events (it never changes the output,
reason or evidence of a confirmed record), and every operator resolution
(``confirm``, ``reject``, ``authorize_retry``) refuses a CONFIRMED or REJECTED
operation (:mod:`effectguard.ledger.resolution`). So another process's
operator cannot invalidate what this process holds, and need not. The
exceptions are outside effectguard's writes: an edit of the ledger behind its
back, which the cache does not see (it serves what was verified when it was
cached; ``agent-effect-ops verify`` finds the edit), and pruning: a prune in
this process forgets what it removed from every cache here
(:func:`~effectguard.ledger.protocol.announce_pruned`), so a pruned
operation's next call reads its tombstone. A cache in another process may
still replay an operation pruned elsewhere: its output, which was correct.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from effectguard.contract import EffectContract
from effectguard.errors import ConfigurationError
from effectguard.executor.logs import listening
from effectguard.executor.observe import Observer, Transition, notify
from effectguard.executor.outputs import decode, not_stored
from effectguard.ledger.protocol import watch_prunes
from effectguard.model import EffectResult, EffectStatus, OperationRecord

__all__ = ["DEFAULT_REPLAY_CACHE", "ReplayCache", "cached_replay"]

#: Terminal operations an executor keeps for replay unless told otherwise.
DEFAULT_REPLAY_CACHE = 10_000


_SCALARS = frozenset({str, int, float, bool, type(None)})

# A replay's result is built slot by slot: the frozen dataclass's __init__ costs twice
# as much, an eighth of a replay. One setter per field, in order (a new field fails here).
_BLANK = object.__new__
(
    _status,
    _operation_id,
    _output,
    _provider_operation_id,
    _attempts,
    _replayed,
    _evidence,
    _reason,
    _handler_error,
) = (getattr(EffectResult, field.name).__set__ for field in dataclasses.fields(EffectResult))


@dataclass(frozen=True, slots=True)
class _Entry:
    record: OperationRecord
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
    def of(cls, record: OperationRecord) -> _Entry:
        evidence = dict(record.evidence)
        if all(type(value) in _SCALARS for value in evidence.values()):
            return cls(record, evidence, None)
        return cls(record, None, json.dumps(evidence))


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

    def lookup(self, operation_id: str, fingerprint: str) -> OperationRecord | None:
        """The cached record of ``operation_id`` if it was claimed for ``fingerprint``, else None.

        A different fingerprint is a miss, so that the caller reads the ledger
        and raises the conflict from the stored record, exactly as without a cache.
        """
        found = self.replay(operation_id, fingerprint)
        if found is None:
            return None
        record, evidence = found
        return record if not record.evidence else dataclasses.replace(record, evidence=evidence)

    def replay(
        self, operation_id: str, fingerprint: str
    ) -> tuple[OperationRecord, dict[str, Any]] | None:
        """Like :meth:`lookup`, the record and a fresh copy of its evidence, copied no further.

        The record's own ``evidence`` is shared with every replay: only the copy may be handed out.
        """
        if not self.size:
            return None
        with self._lock:
            entry = self._entries.get(operation_id)
            if entry is None or entry.record.fingerprint != fingerprint:
                return None
            self._entries.move_to_end(operation_id)
        return entry.record, entry.evidence()

    def remember(self, record: OperationRecord) -> None:
        """Keep ``record`` if it is terminal with a stored output (or none to store).

        Only a record a replay has just read and checked belongs here. A
        CONFIRMED record whose output was not stored is not kept: its replays
        read the ledger each time, as they always have.
        """
        if not self.size or not record.status.terminal or not_stored(record) is not None:
            return
        entry = _Entry.of(record)
        with self._lock:
            self._entries[record.operation_id] = entry
            self._entries.move_to_end(record.operation_id)
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


def cached_replay(
    cache: ReplayCache,
    contract: EffectContract,
    operation_id: str,
    fingerprint: str,
    observers: tuple[Observer, ...],
) -> EffectResult[Any] | None:
    """The replay of a terminal operation ``cache`` holds for ``fingerprint``, else None.

    No ledger read and no step of the state machine: the result is built from
    the cached record, and ``observers`` hear of it (the log observer only when
    replays are logged). None: the call runs the machine, which reads the ledger.
    """
    found = cache.replay(operation_id, fingerprint)
    if found is None:
        return None
    record, evidence = found
    result: EffectResult[Any] = _BLANK(EffectResult)
    _status(result, record.status)
    _operation_id(result, record.operation_id)
    _output(result, decode(contract, record) if record.status is EffectStatus.CONFIRMED else None)
    _provider_operation_id(result, record.provider_operation_id)
    _attempts(result, record.attempts)
    _replayed(result, True)  # noqa: FBT003 - a setter's value
    _evidence(result, evidence)
    _reason(result, record.reason)
    _handler_error(result, None)
    observers = listening(observers, None, result.status, final=True, replayed=True)
    if observers:
        notify(observers, Transition.of_result(contract.name, contract.version, result))
    return result
