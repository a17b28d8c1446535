"""A DBOS workflow pays an invoice; its process dies mid-step, and a quarantined capture waits.

Needs ``pip install 'effectguard[dbos]'``. Offline: DBOS keeps its system
database in a SQLite file, and fake providers stand in for your payment API.

Two stories, each with its own provider:

1. **A process killed inside the step.** The workflow's step captures the
   payment; the provider commits; the process is SIGKILLed before DBOS writes
   the step's checkpoint. The next launch of the application recovers the
   workflow, and DBOS runs the step again from its start. The step is an
   ``effect_step``, so the capture's operation id is the workflow's and the
   step's (``capture:dbos:<workflow id>:<step id>``), the same as before the
   kill: the ledger finds the dead process's claim, asks the provider (its
   lookup says "committed") and confirms it. No second capture is sent.
2. **An unconfirmed capture.** This provider commits the capture but the
   acknowledgement is lost, and it has no lookup, so the operation is
   QUARANTINED. The workflow does not fail: it waits with ``DBOS.recv``
   (durably), re-checking the ledger. An operator checks the provider and
   confirms with ``agent-effect-ops confirm``; ``wake`` ends the wait; the
   workflow returns the confirmed capture.

The script exits non-zero unless each provider holds exactly one payment.

To use it with your own stack: make ``capture`` call your payment API,
forwarding ``idempotency_key``, with a ``probe=`` lookup if your provider has
one; point DBOS's ``system_database_url`` and the ledger at PostgreSQL when
your workers run on several hosts. Run: ``python recipes/dbos_payments.py``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from dbos import DBOS, DBOSConfig, SetWorkflowID

import effectguard
from effectguard import (
    INJECTED,
    EffectStatus,
    OutcomeProbeResult,
    SQLiteEffectLedger,
    call_scoped,
    effect,
)
from effectguard.adapters.dbos import PENDING_EVENT, effect_step, pending_effect, wake
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan, Lookup

#: Set in the first worker's environment only: it kills itself once the provider committed.
CRASH = "DBOS_RECIPE_CRASH_AFTER_COMMIT"


class Shop:
    """The payment provider this process uses (set by each story)."""

    provider = FakePaymentProvider()


def _probe(invoice_id: str, amount_cents: int, *, idempotency_key: str) -> OutcomeProbeResult:  # noqa: ARG001 - a probe is called like the tool
    return Shop.provider.probe({"invoice_id": invoice_id}, idempotency_key=idempotency_key)


@effect(operation_id=call_scoped("capture"), probe=_probe)
def capture(invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED) -> Any:
    """Capture a card payment; the first worker dies right after the provider committed it."""
    output = Shop.provider.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)
    if os.environ.pop(CRASH, None):
        print(f"worker {os.getpid()}: the provider committed; killed before the checkpoint")
        os.kill(os.getpid(), signal.SIGKILL)
    return output


@effect_step(retries_allowed=True, max_attempts=3, wait_initial=0.5, wait_max=2.0)
def charge(invoice_id: str, amount_cents: int) -> Any:
    """The workflow's step: its captures are scoped by the workflow id and this step's id."""
    return capture(invoice_id=invoice_id, amount_cents=amount_cents)


@DBOS.workflow()
def pay_invoice(invoice_id: str, amount_cents: int) -> Any:
    """Charge the invoice; returns the provider's capture."""
    return charge(invoice_id, amount_cents)


def launch(system_database: Path) -> None:
    """Configure and launch DBOS; a launch recovers the workflows this executor left pending."""
    config: DBOSConfig = {
        "name": "dbos-payments-recipe",
        "system_database_url": f"sqlite:///{system_database}",
        # Recovery takes the pending workflows of this executor id and application version.
        "application_version": "1",
        "executor_id": "local",
    }
    DBOS(config=config)
    DBOS.launch()


def worker(workdir: Path, workflow_id: str) -> int:
    """A worker process: launch (recovering what is pending), run the workflow, print it."""
    Shop.provider = FakePaymentProvider(
        idempotency_guaranteed=False, lookup=Lookup.STRONG, path=workdir / "payments.db"
    )
    effectguard.configure(workdir / "ledger.db")
    launch(workdir / "dbos.sqlite")
    # Starting a workflow id DBOS already holds starts nothing new: it is the same workflow,
    # which the second worker's launch has just recovered.
    with SetWorkflowID(workflow_id):
        handle = DBOS.start_workflow(pay_invoice, "INV-1042", 1999)
    print(f"worker {os.getpid()}: workflow {workflow_id} returned {handle.get_result()}")
    DBOS.destroy()
    return 0


def crash_story(workdir: Path) -> bool:
    """Story 1: a worker is killed inside the step; a new one recovers the workflow."""
    command = [sys.executable, __file__, "worker", str(workdir), "pay-INV-1042"]
    first = subprocess.run(  # noqa: S603 - this script, with arguments it wrote
        command, env={**os.environ, CRASH: "1"}, check=False, timeout=120
    )
    print(f"first worker exited with {first.returncode} (SIGKILL is {-signal.SIGKILL})")
    second = subprocess.run(command, check=False, timeout=120)  # noqa: S603 - ditto
    held = FakePaymentProvider(path=workdir / "payments.db").committed()
    print(f"story 1: payments the provider holds: {held}")
    return first.returncode == -signal.SIGKILL and second.returncode == 0 and held == 1


def operator_confirms(ledger: Path, operation: str, provider: FakePaymentProvider) -> None:
    """What an operator runs after finding the capture at the provider."""
    found = provider.find_capture(_key_of(ledger, operation))
    if found is None:
        sys.exit("the provider has no capture to confirm")
    script = shutil.which("agent-effect-ops", path=str(Path(sys.executable).parent))
    command = [script] if script else [sys.executable, "-m", "effectguard.cli.ops"]
    done = subprocess.run(  # noqa: S603 - our own console script, with arguments we wrote
        [
            *command, "--db", str(ledger), "confirm", operation,
            "--output-json", json.dumps(found), "--provider-operation-id", str(found["id"]),
            "--actor", "ops@example.com", "--reason", "capture seen in the provider's dashboard",
            "--evidence-reference", f"dashboard:{found['id']}",
        ],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    if done.returncode != 0:
        sys.exit(f"agent-effect-ops confirm failed: {done.stderr.strip()}")
    print(f"operator: confirmed {operation} as {found['id']}")


def _key_of(ledger: Path, operation: str) -> str:
    with SQLiteEffectLedger(ledger) as reader:
        record = reader.get(operation)
    if record is None or record.provider_key is None:
        sys.exit(f"{operation} is not in the ledger")
    return record.provider_key


def wait_story(workdir: Path) -> bool:
    """Story 2: the capture is quarantined; the workflow waits until an operator confirms."""
    workdir.mkdir()
    Shop.provider = FakePaymentProvider(
        idempotency_guaranteed=False, lookup=Lookup.NONE, faults=FaultPlan([Fault.LOSE_ACK])
    )
    configuration = effectguard.configure(workdir / "ledger.db")
    launch(workdir / "dbos.sqlite")
    try:
        with SetWorkflowID("pay-INV-2001"):
            handle = DBOS.start_workflow(pay_invoice, "INV-2001", 4500)
        while (pending := pending_effect(DBOS.get_event("pay-INV-2001", PENDING_EVENT, 0))) is None:
            time.sleep(0.1)
        print(f"waiting ({handle.get_status().status}): {pending.message()}")
        operator_confirms(workdir / "ledger.db", pending.operation_id, Shop.provider)
        wake("pay-INV-2001", pending.operation_id)
        print(f"workflow pay-INV-2001 returned {handle.get_result()}")
        record = configuration.executor.ledger.get(pending.operation_id)
    finally:
        DBOS.destroy()
        configuration.restore()
    held = Shop.provider.committed()
    print(f"story 2: payments the provider holds: {held}")
    return held == 1 and record is not None and record.status is EffectStatus.CONFIRMED


def main() -> int:
    """Run both stories in a scratch directory; 0 when each provider holds exactly one payment."""
    with tempfile.TemporaryDirectory() as scratch:
        crashed = crash_story(Path(scratch))
        waited = wait_story(Path(scratch) / "wait")
    return 0 if crashed and waited else 1


if __name__ == "__main__":
    # effectguard installs no log handler; this one prints each event it logs as one short line.
    logging.basicConfig(level=logging.WARNING, format="  log: %(levelname)s %(message).120s")
    logging.getLogger("effectguard").setLevel(logging.INFO)
    if sys.argv[1:2] == ["worker"]:
        sys.exit(worker(Path(sys.argv[2]), sys.argv[3]))
    sys.exit(main())
