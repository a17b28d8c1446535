"""The Celery app the adapter's tests run real workers of (``-A tests.adapters.celery_shop``).

Configured from the environment the test sets, so a test and its workers
agree on the broker, the queue (one per test, so no message of another run
is ever consumed), the ledger and the provider's file:

- ``EG_CELERY_BROKER``: the broker URL; results go to Redis db 1 (``EG_CELERY_BACKEND``).
- ``EG_CELERY_QUEUE``: the queue the worker consumes and the tasks are sent to.
- ``EG_CELERY_DIR``: the provider's file, and the marker and gate files.
- ``EG_CELERY_LEDGER``: the ledger's path or ``postgresql://`` URL.
- ``EG_CELERY_WAIT_FOR_PEER``: seconds a run that finds another worker's live lease
  waits for its outcome (the executor's ``wait_for_peer``); ``0`` makes it raise
  ``EffectInProgress`` at once, which the task turns into a Celery retry.
- ``EG_CELERY_SWEEP=off``: no recovery sweep on ``worker_ready``, so the tasks
  themselves, not a sweep, reconcile what a killed worker left.

The handler captures at the provider, then (once per directory) writes the
``committed`` marker and waits for the ``gate`` file: the test kills the
worker there, after the provider committed and before the task returned.
The provider has a strong lookup, so a redelivered run reconciles by probe.
With a ``hold-probe`` file in the directory, the first probe likewise writes
``probing`` and waits for ``probe-gate``: a second worker then finds the
operation RECONCILING under the first one's live lease.
"""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path
from typing import Any

from celery import Celery

import effectguard
from effectguard import INJECTED, EffectExecutor, call_scoped, effect, open_ledger
from effectguard.adapters.celery import EffectTask, recover_on_worker_ready
from effectguard.testkit import FakePaymentProvider, Lookup

BROKER = os.environ.get("EG_CELERY_BROKER", "redis://127.0.0.1:6379/0")
QUEUE = os.environ.get("EG_CELERY_QUEUE", "effectguard-tests")
DIRECTORY = Path(os.environ.get("EG_CELERY_DIR", "."))
LEDGER = os.environ.get("EG_CELERY_LEDGER", str(DIRECTORY / "ledger.db"))
#: Seconds an unacknowledged Redis message waits before another worker may take it.
VISIBILITY_TIMEOUT = 2

#: ``EG_CELERY_BACKEND=none``: no result backend, so an unconfirmed effect rejects its message.
BACKEND = os.environ.get("EG_CELERY_BACKEND", "redis://127.0.0.1:6379/1")
app = Celery("effectguard_tests", broker=BROKER, backend=None if BACKEND == "none" else BACKEND)
app.conf.update(
    task_default_queue=QUEUE,
    # kombu 5.7 also sweeps for such messages every second rather than every 100 s; older
    # kombu ignores the two options and sweeps once as the worker starts.
    broker_transport_options={
        "visibility_timeout": VISIBILITY_TIMEOUT,
        "unacked_restore_interval": 1,
        "unacked_restore_throttle": 1,
    },
    result_expires=600,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
)

payments = FakePaymentProvider(
    idempotency_guaranteed=False, lookup=Lookup.STRONG, path=DIRECTORY / "payments.db"
)
_WAIT = os.environ.get("EG_CELERY_WAIT_FOR_PEER")
executor = EffectExecutor(
    open_ledger(LEDGER), wait_for_peer=None if _WAIT is None else float(_WAIT)
)
effectguard.configure(executor=executor)
SWEEPS = DIRECTORY / "sweeps"


def _hold_once(marker_name: str, gate_name: str) -> None:
    """The first time in this directory: write the marker (our pid), then wait for the gate."""
    marker = DIRECTORY / marker_name
    draft = DIRECTORY / f"{marker_name}.{os.getpid()}"
    draft.write_text(str(os.getpid()))
    try:
        # A hard link appears whole and only once: a reader never sees an empty marker.
        os.link(draft, marker)
    except FileExistsError:
        return
    finally:
        draft.unlink()
    gate = DIRECTORY / gate_name
    while not gate.exists():
        time.sleep(0.05)


def _capture(
    invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED
) -> dict[str, Any]:
    output = payments.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)
    _hold_once("committed", "gate")
    return output


def _probe(invoice_id: str, amount_cents: int, *, idempotency_key: str) -> Any:
    if (DIRECTORY / "hold-probe").exists():
        _hold_once("probing", "probe-gate")
    return payments.probe({"invoice_id": invoice_id}, idempotency_key=idempotency_key)


capture_scoped = effect(operation_id=call_scoped("capture"), probe=_probe)(_capture)
capture_by_invoice = effect(operation_id="invoice:{invoice_id}:capture", probe=_probe)(_capture)


def _capture_unprobed(
    invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED
) -> Any:
    payments.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)
    msg = "connection reset after the request was sent"
    raise ConnectionResetError(msg)


capture_unprobed = effect(operation_id=call_scoped("capture-unprobed"))(_capture_unprobed)


#: Retries of a held lease: enough that a loser outlasts the winner even on a loaded machine.
MAX_RETRIES = 20


@app.task(base=EffectTask, bind=True, name="shop.charge", max_retries=MAX_RETRIES)
def charge(self: EffectTask, invoice_id: str, amount_cents: int) -> dict[str, Any]:
    """Capture under the task's scope: the operation id is the task id's."""
    output: dict[str, Any] = capture_scoped(invoice_id=invoice_id, amount_cents=amount_cents)
    return {"output": output, "task_id": self.request.id}


@app.task(base=EffectTask, name="shop.charge_invoice")
def charge_invoice(invoice_id: str, amount_cents: int) -> dict[str, Any]:
    """Capture keyed by the invoice alone: two messages for one invoice are one operation."""
    output: dict[str, Any] = capture_by_invoice(invoice_id=invoice_id, amount_cents=amount_cents)
    return output


@app.task(base=EffectTask, name="shop.charge_unprobed")
def charge_unprobed(invoice_id: str, amount_cents: int) -> dict[str, Any]:
    """A capture whose acknowledgement is lost and that has no probe: it is quarantined."""
    output: dict[str, Any] = capture_unprobed(invoice_id=invoice_id, amount_cents=amount_cents)
    return output


def _sweep() -> object:
    report = effectguard.recover(executor.ledger, tools=[capture_scoped, capture_by_invoice])
    with SWEEPS.open("a", encoding="utf-8") as out:
        out.write(f"{len(report.probed)}\n")
    return report


if os.environ.get("EG_CELERY_SWEEP") != "off":
    recover_on_worker_ready(app, functools.partial(_sweep))
