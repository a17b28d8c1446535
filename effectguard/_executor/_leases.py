"""Leases held by this process: which tokens are in use, and keeping them renewed.

A token is *active* from just before the claim that installs it until its
holder is done with it, including while a handler that passed its deadline is
still running. A lease owned by this process whose token is not active is
provably abandoned, which lets a later call take it over without waiting for
expiry and without presuming overlap risk.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from effectguard import _process
from effectguard.errors import FencedWriteError, OperationNotFoundError

if TYPE_CHECKING:
    from effectguard._model import LeaseOwner, OperationRecord, OverlapHolder
    from effectguard.ledger._protocol import EffectLedger

__all__ = ["KEEPER", "TOKENS", "LeaseKeeper", "Renewal", "abandoned", "live_overlap"]

logger = logging.getLogger("effectguard.lease")


class _ActiveTokens:
    """Reference counts of the lease tokens this process is using."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def hold(self, token: str) -> None:
        with self._lock:
            self._counts[token] = self._counts.get(token, 0) + 1

    def release(self, token: str) -> None:
        with self._lock:
            left = self._counts.get(token, 0) - 1
            if left > 0:
                self._counts[token] = left
            else:
                self._counts.pop(token, None)

    def active(self, token: str) -> bool:
        with self._lock:
            return token in self._counts

    def reset(self) -> None:
        """Forget every token: in a child after ``fork()``, the parent's holds are not ours."""
        self._lock = threading.Lock()
        self._counts = {}


@dataclass(eq=False)
class Renewal:
    """One lease the keeper renews; ``lost`` turns True if another writer took it."""

    ledger: EffectLedger
    operation_id: str
    token: str
    seconds: float
    now: Callable[[], float | None]
    due: float = 0.0
    lost: bool = False
    stopped: bool = field(default=False, repr=False)


class LeaseKeeper:
    """Renews registered leases every third of their length from one background thread.

    Most leases are stopped long before they are first due (a call takes
    milliseconds, a lease lasts seconds), so starting and stopping one never
    wakes the keeper: it wakes only when the earliest live lease is due, and
    drops stopped ones as they reach the head of its queue.
    """

    def __init__(self) -> None:
        # start() takes the lock itself (a C context manager); the condition is over it.
        self._lock = threading.Lock()
        self._condition = threading.Condition(self._lock)
        # (due, sequence, renewal): tuples compare in C; the sequence breaks ties.
        self._queue: list[tuple[float, int, Renewal]] = []
        self._sequence = itertools.count()
        self._thread: threading.Thread | None = None

    def _push(self, renewal: Renewal) -> None:
        heapq.heappush(self._queue, (renewal.due, next(self._sequence), renewal))

    def start(
        self,
        ledger: EffectLedger,
        operation_id: str,
        token: str,
        seconds: float,
        now: Callable[[], float | None],
    ) -> Renewal:
        """Keep the lease renewed until :meth:`stop` is called with the returned handle."""
        due = time.monotonic() + seconds / 3
        renewal = Renewal(ledger, operation_id, token, seconds, now, due)
        with self._lock:  # the condition's lock
            queue = self._queue
            heapq.heappush(queue, (due, next(self._sequence), renewal))  # _push, inline
            # The keeper clears _thread as it ends (and a fork's reset does): no is_alive() here.
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="effectguard-lease-keeper", daemon=True
                )
                self._thread.start()
            elif queue[0][2] is renewal:
                # Due before everything queued: the keeper must wake earlier than it planned.
                self._condition.notify()
        return renewal

    def stop(self, renewal: Renewal) -> None:
        """Stop renewing; the entry leaves the queue when it reaches the head."""
        renewal.stopped = True

    def _next_due(self) -> Renewal:
        """Wait until the earliest live renewal is due and take it (call holding the condition)."""
        queue = self._queue
        while True:
            while queue and queue[0][2].stopped:
                heapq.heappop(queue)
            if not queue:
                self._condition.wait()
                continue
            delay = queue[0][0] - time.monotonic()
            if delay <= 0:
                return heapq.heappop(queue)[2]
            self._condition.wait(delay)

    def _run(self) -> None:
        try:
            while True:
                with self._condition:
                    renewal = self._next_due()
                self._renew(renewal)
                if not renewal.stopped and not renewal.lost:
                    with self._condition:
                        self._push(renewal)
        finally:
            # However it ends, the next start() starts another keeper.
            with self._condition:
                if self._thread is threading.current_thread():
                    self._thread = None

    @staticmethod
    def _renew(renewal: Renewal) -> None:
        try:
            renewal.ledger.renew(
                renewal.operation_id, renewal.token, renewal.seconds, now=renewal.now()
            )
        except (FencedWriteError, OperationNotFoundError):
            renewal.lost = True
            return
        except Exception as exc:  # noqa: BLE001 - the keeper thread must outlive any one failure
            # Keep trying: the lease is still ours until it expires.
            logger.warning("could not renew lease on %s: %s", renewal.operation_id, exc)
            renewal.due = time.monotonic() + min(renewal.seconds / 6, 1.0)
            return
        renewal.due = time.monotonic() + renewal.seconds / 3

    def reset(self) -> None:
        """Forget every renewal: in a child after ``fork()``, the parent's leases are not ours."""
        self._lock = threading.Lock()
        self._condition = threading.Condition(self._lock)
        self._queue = []
        self._sequence = itertools.count()
        self._thread = None


#: Tokens in use by this process.
TOKENS = _ActiveTokens()
#: The process's lease keeper.
KEEPER = LeaseKeeper()


def _after_fork_in_child() -> None:
    # Locks may have been held by threads that do not exist in the child.
    TOKENS.reset()
    KEEPER.reset()


os.register_at_fork(after_in_child=_after_fork_in_child)


def abandoned(token: str | None, owner: LeaseOwner | None) -> bool:
    """True when lease ``token`` of ``owner`` provably has no running holder.

    In this process that means the token is not active; elsewhere on this host,
    that the owner process is gone. An owner this process cannot see is alive.
    """
    if token is None or owner is None:
        return True
    if _process.is_this_process(owner):
        return not TOKENS.active(token)
    return _process.process_gone(owner)


def live_overlap(record: OperationRecord) -> tuple[OverlapHolder, ...]:
    """The record's overlap holders that may still be sending."""
    return tuple(h for h in record.overlap if not abandoned(h.token, h.owner))
