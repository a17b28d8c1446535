"""Builders shared by the executor tests: a capture contract, dead owners, waiting."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from effectguard import EffectContract, OutcomeProbeResult, UnknownOutcomePolicy
from effectguard._model import LeaseOwner
from effectguard._process import current_owner
from effectguard.testkit import FakePaymentProvider

ARGS = {"invoice_id": "INV-1042", "amount_cents": 1999}
OPERATION = "invoice:INV-1042:capture"
KEY = "capture:INV-1042"


def capture_contract(
    provider: FakePaymentProvider | None = None,
    *,
    guaranteed: bool = False,
    probe: bool | Callable[..., OutcomeProbeResult] = True,
    **overrides: Any,
) -> EffectContract:
    """A payment-capture contract keyed by invoice, probing ``provider`` unless told otherwise."""
    outcome_probe: Callable[..., OutcomeProbeResult] | None
    if callable(probe):
        outcome_probe = probe
    elif probe and provider is not None:
        outcome_probe = provider.probe
    else:
        outcome_probe = None
    options: dict[str, Any] = {
        "name": "payments.capture",
        "operation_id": lambda a: f"invoice:{a['invoice_id']}:capture",
        "provider_idempotency_key": lambda a: f"capture:{a['invoice_id']}",
        "provider_idempotency_guaranteed": guaranteed,
        "outcome_probe": outcome_probe,
        "provider_operation_id": lambda out: out.get("id") if isinstance(out, dict) else None,
        "unknown_outcome": UnknownOutcomePolicy.QUARANTINE,
    }
    options.update(overrides)
    return EffectContract(**options)


def dead_owner() -> LeaseOwner:
    """A lease owner on this host whose process has exited and been reaped."""
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    me = current_owner()
    return LeaseOwner(me.host, me.boot_id, me.pid_namespace, int(child.stdout), "1")


def foreign_owner() -> LeaseOwner:
    """A lease owner on another host: nothing here can prove it gone."""
    return LeaseOwner(f"not-{socket.gethostname()}", "other-boot", "pid:[1]", 4242, "99")


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll ``predicate`` until it holds; fail after ``timeout`` seconds.

    Used only where a background thread (a late handler) must finish first.
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            msg = "condition not reached in time"
            raise AssertionError(msg)
        time.sleep(0.01)
