"""A Celery worker dies after the provider charged the card; the redelivered task charges nothing.

Needs ``pip install 'effectguard[celery]'`` and a broker: RabbitMQ at
127.0.0.1:5672 by default, or set ``CELERY_PAYMENTS_BROKER`` (for example
``redis://127.0.0.1:6379/0``). The payment provider is the testkit's fake,
whose state is a file every process shares, so its count is the ground truth.

What happens: the script sends one ``shop.charge`` task and starts a real
``celery worker`` subprocess (``-A celery_payments``, this file). The task
charges the card, then stalls before returning (standing in for a slow
network or a long tail of work), and the script SIGKILLs the worker there:
the provider holds the charge, the task never returned, its message was never
acknowledged (``acks_late``). The broker hands the message out again
(RabbitMQ as soon as the dead worker's connection drops; Redis once the
visibility timeout has passed), a second worker runs the task body again, and
effectguard finds the operation the first worker left DISPATCHED, asks the
provider (the probe finds the charge), confirms it and returns the first
charge instead of sending another. The script exits non-zero unless the
provider holds exactly one charge.

To use it with your own stack, change three things:

- ``capture``: call your payment API, forwarding ``idempotency_key``; give
  ``probe=`` your provider's lookup (without one, a redelivered task finds the
  outcome unknown and ends in the ``EFFECT_UNCONFIRMED`` state for an operator,
  never charging again).
- The ledger: a file all workers share on one host; with workers on several
  hosts, ``effectguard.configure("postgresql://...")``.
- The broker settings: with Redis, ``visibility_timeout`` must exceed your
  longest task (it is 2 s here so the demo is quick).

Run: ``python recipes/celery_payments.py``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from celery import Celery

import effectguard
from effectguard import INJECTED, EffectStatus, call_scoped, effect, open_ledger
from effectguard.adapters.celery import EffectTask
from effectguard.testkit import FakePaymentProvider, Lookup

BROKER = os.environ.get("CELERY_PAYMENTS_BROKER", "amqp://guest:guest@127.0.0.1:5672//")
#: The scratch directory the script and its workers share (set by the script for its workers).
WORKDIR = Path(os.environ.get("CELERY_PAYMENTS_DIR", tempfile.gettempdir()))
#: A queue of this run's own, so no message of an earlier run is ever consumed.
QUEUE = os.environ.get("CELERY_PAYMENTS_QUEUE", "celery-payments")
VISIBILITY_TIMEOUT = 2

# rpc:// sends each result back to the client that sent the task; with Redis, Redis keeps it.
app = Celery(
    "celery_payments", broker=BROKER, backend=BROKER if BROKER.startswith("redis") else "rpc://"
)
app.conf.update(
    task_default_queue=QUEUE,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    broker_transport_options={
        "visibility_timeout": VISIBILITY_TIMEOUT,
        "unacked_restore_interval": 1,
        "unacked_restore_throttle": 1,
    },
)

payments = FakePaymentProvider(
    idempotency_guaranteed=False, lookup=Lookup.STRONG, path=WORKDIR / "payments.db"
)


def find_capture(invoice_id: str, amount_cents: int, *, idempotency_key: str) -> Any:  # noqa: ARG001 - called like the tool
    """Ask the provider whether this capture happened (the fake's strong lookup)."""
    return payments.probe({"invoice_id": invoice_id}, idempotency_key=idempotency_key)


@effect(operation_id=call_scoped("capture"), probe=find_capture)
def capture(
    invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED
) -> dict[str, Any]:
    """Charge the invoice; the first run stalls after the charge, where the script kills it."""
    charge = payments.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)
    stalled = WORKDIR / "charged"
    if not stalled.exists():
        stalled.write_text(str(os.getpid()))
        time.sleep(60)  # the script SIGKILLs this worker long before this returns
    return charge


@app.task(base=EffectTask, name="shop.charge")  # type: ignore[untyped-decorator]  # celery is untyped
def charge_invoice(invoice_id: str, amount_cents: int) -> dict[str, Any]:
    """The Celery task: the operation id follows the task id, which a redelivery keeps."""
    return capture(invoice_id=invoice_id, amount_cents=amount_cents)


def start_worker(name: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start a solo-pool ``celery worker`` of this file on this run's queue."""
    with (WORKDIR / f"{name}.log").open("wb") as log:
        return subprocess.Popen(  # noqa: S603 - this interpreter, on this file, arguments written here
            [
                sys.executable, "-m", "celery", "-A", "celery_payments", "worker",
                "--pool", "solo", "-Q", QUEUE, "-n", f"{name}@%h", "-l", "info",
                "--without-gossip", "--without-mingle", "--without-heartbeat",
            ],
            cwd=Path(__file__).resolve().parent, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip


def wait_for(path: Path, timeout: float) -> bool:
    """Wait until ``path`` exists; False if it never did within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def main() -> int:
    """Send one charge, kill the worker after the provider charged, let the broker redeliver."""
    env = dict(os.environ)
    sent = charge_invoice.apply_async(args=("INV-1042", 4200), queue=QUEUE)
    first = start_worker("first", env)
    workers = [first]
    try:
        if not wait_for(WORKDIR / "charged", timeout=30):
            print((WORKDIR / "first.log").read_text(errors="replace")[-2000:])
            return 1
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
        print(f"worker 1 charged the card, then was SIGKILLed; provider: {payments.committed()}")
        if BROKER.startswith("redis"):
            # Redis hands the unacknowledged message out again once it is older than this.
            time.sleep(VISIBILITY_TIMEOUT + 0.5)
        workers.append(start_worker("second", env))
        value = sent.get(timeout=30)
    finally:
        # The task is done and acknowledged; a warm shutdown would only cost time.
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
            worker.wait(timeout=10)
    ledger = open_ledger(str(WORKDIR / "ledger.db"))
    record = ledger.get(f"capture:celery:shop.charge:{sent.id}")
    ledger.close()
    status = record.status if record is not None else None
    print(f"worker 2 finished the redelivered task: {value['id']}, operation {status}")
    print(f"charges the provider holds: {payments.committed()}")
    return 0 if payments.committed() == 1 and status is EffectStatus.CONFIRMED else 1


def _reachable(url: str) -> bool:
    parts = urlsplit(url)
    default = 6379 if parts.scheme.startswith("redis") else 5672
    try:
        socket.create_connection((parts.hostname or "127.0.0.1", parts.port or default), 1).close()
    except OSError:
        return False
    return True


effectguard.configure(str(WORKDIR / "ledger.db"))

if __name__ == "__main__":
    if "CELERY_PAYMENTS_DIR" in os.environ:
        sys.exit(main())
    if not _reachable(BROKER):
        sys.exit(f"no broker at {BROKER}: start RabbitMQ, or set CELERY_PAYMENTS_BROKER")
    with tempfile.TemporaryDirectory() as scratch:
        # Run again with a scratch directory and a queue of its own, which the workers inherit.
        run = {
            **os.environ,
            "CELERY_PAYMENTS_DIR": scratch,
            "CELERY_PAYMENTS_QUEUE": f"celery-payments-{uuid.uuid4().hex}",
        }
        sys.exit(subprocess.call([sys.executable, __file__], env=run))  # noqa: S603 - this file again
