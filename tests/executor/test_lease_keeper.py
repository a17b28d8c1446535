"""The lease keeper renews what is live, and only that, whatever order leases come in."""

from __future__ import annotations

import threading
from typing import Any

from effectguard._executor._leases import LeaseKeeper


class RenewalLog:
    """A ledger that only records renewals and signals each one."""

    def __init__(self) -> None:
        self.renewed: list[str] = []
        self.signals: dict[str, threading.Event] = {}

    def expect(self, operation_id: str) -> threading.Event:
        """Return an event set when ``operation_id`` is renewed."""
        self.signals[operation_id] = threading.Event()
        return self.signals[operation_id]

    def renew(self, operation_id: str, *_: Any, **__: Any) -> None:
        """Record the renewal of ``operation_id``."""
        self.renewed.append(operation_id)
        if operation_id in self.signals:
            self.signals[operation_id].set()


def no_clock() -> None:
    return None


def test_a_lease_due_before_everything_queued_is_renewed_on_time():
    """A short lease started after a long one is renewed; the keeper does not sleep past it."""
    keeper, ledger = LeaseKeeper(), RenewalLog()
    keeper.start(ledger, "long", "t1", 3000.0, no_clock)  # first due in 1000 s
    renewed = ledger.expect("short")
    keeper.start(ledger, "short", "t2", 0.03, no_clock)
    assert renewed.wait(10)
    assert "long" not in ledger.renewed


def test_a_stopped_lease_is_never_renewed():
    """Stopping a lease before it is due means it is never renewed, even once it is due."""
    keeper, ledger = LeaseKeeper(), RenewalLog()
    stopped = keeper.start(ledger, "stopped", "t1", 0.03, no_clock)
    keeper.stop(stopped)
    renewed = ledger.expect("live")
    live = keeper.start(ledger, "live", "t2", 0.09, no_clock)  # due after the stopped one
    assert renewed.wait(10)
    keeper.stop(live)
    assert "stopped" not in ledger.renewed


def test_many_stopped_leases_ahead_of_a_live_one_do_not_delay_it():
    """Thousands of stopped leases at the head of the queue are dropped, the live one renewed."""
    keeper, ledger = LeaseKeeper(), RenewalLog()
    for index in range(2000):
        keeper.stop(keeper.start(ledger, f"done-{index}", f"t{index}", 0.03, no_clock))
    renewed = ledger.expect("live")
    keeper.start(ledger, "live", "live", 0.06, no_clock)
    assert renewed.wait(10)
    assert ledger.renewed[0] == "live"
