"""The DBOS application the adapter's tests run in child processes, one per DBOS launch.

Configured from the environment the test sets, so a test and its processes
agree on the databases and the provider's file:

- ``EG_DBOS_DIR``: the provider's file, the marker files and the log of step entries.
- ``EG_DBOS_LEDGER``: the effectguard ledger's path or ``postgresql://`` URL.
- ``EG_DBOS_SYSTEM_DB``: DBOS's system database URL (``sqlite:///...`` or ``postgresql://...``).
- ``EG_DBOS_SCHEMA``: the system database's schema on PostgreSQL (one per test).

``python -m tests.adapters.dbos_shop start WORKFLOW WORKFLOW_ID INVOICE AMOUNT``
launches DBOS, starts the workflow under that id and prints its result;
``recover WORKFLOW_ID`` only launches DBOS (whose launch recovers the
workflows this executor left pending) and prints the result of that workflow.
Each step body appends a line to ``entries`` as it starts; the first capture
in a directory writes the ``committed`` marker after the provider committed
and then hangs, so the test can SIGKILL the process there, before DBOS wrote
the step's checkpoint.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from dbos import DBOS, DBOSConfig, SetWorkflowID

from effectguard import INJECTED, EffectExecutor, call_scoped, effect, open_ledger
from effectguard.adapters.dbos import effect_step
from effectguard.testkit import FakePaymentProvider, Lookup

DIRECTORY = Path(os.environ.get("EG_DBOS_DIR", "."))
LEDGER = os.environ.get("EG_DBOS_LEDGER", str(DIRECTORY / "ledger.db"))
SYSTEM_DB = os.environ.get("EG_DBOS_SYSTEM_DB", f"sqlite:///{DIRECTORY / 'dbos.sqlite'}")
SCHEMA = os.environ.get("EG_DBOS_SCHEMA")
#: How long the unconfirmed step's first wait lasts, and the longest it grows to (seconds).
WAIT = 0.5

payments = FakePaymentProvider(
    idempotency_guaranteed=False, lookup=Lookup.STRONG, path=DIRECTORY / "payments.db"
)
executor = EffectExecutor(open_ledger(LEDGER))


def _entered(what: str) -> None:
    with (DIRECTORY / "entries").open("a", encoding="utf-8") as out:
        out.write(f"{what} {os.getpid()}\n")


def _hold_once() -> None:
    """The first time in this directory: say the provider committed, then hang until killed."""
    marker = DIRECTORY / "committed"
    if marker.exists():
        return
    marker.write_text(str(os.getpid()))
    while True:
        time.sleep(0.05)


def _probe(invoice_id: str, amount_cents: int, *, idempotency_key: str) -> Any:
    return payments.probe({"invoice_id": invoice_id}, idempotency_key=idempotency_key)


@effect(operation_id=call_scoped("capture"), probe=_probe, executor=executor)
def capture(invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED) -> Any:
    """Capture at the provider; the first time, hang after it committed."""
    output = payments.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)
    _hold_once()
    return output


@effect(operation_id=call_scoped("capture-unprobed"), executor=executor)
def capture_unprobed(invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED) -> Any:
    """Capture, then lose the acknowledgement; no probe, so the operation is quarantined."""
    payments.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)
    msg = "connection reset after the request was sent"
    raise ConnectionResetError(msg)


@effect_step(retries_allowed=True, max_attempts=3, interval_seconds=0.1)
def charge(invoice_id: str, amount_cents: int) -> Any:
    """The guarded step: the capture's operation id is the workflow's and this step's."""
    _entered("charge")
    return capture(invoice_id=invoice_id, amount_cents=amount_cents)


@effect_step(wait_initial=WAIT, wait_max=WAIT)
def charge_unprobed(invoice_id: str, amount_cents: int) -> Any:
    """A guarded step whose capture loses its acknowledgement and has no probe."""
    _entered("charge_unprobed")
    return capture_unprobed(invoice_id=invoice_id, amount_cents=amount_cents)


@DBOS.step()
def charge_unguarded(invoice_id: str, amount_cents: int) -> Any:
    """The same capture in a plain DBOS step, without effectguard: the baseline."""
    _entered("charge_unguarded")
    output = payments.capture(invoice_id, amount_cents, idempotency_key=None)
    _hold_once()
    return output


@DBOS.workflow()
def pay(invoice_id: str, amount_cents: int) -> Any:
    """Charge the invoice in one guarded step."""
    return {"capture": charge(invoice_id, amount_cents), "workflow_id": DBOS.workflow_id}


@DBOS.workflow()
def pay_unprobed(invoice_id: str, amount_cents: int) -> Any:
    """Charge with the capture that is quarantined: the workflow waits for an operator."""
    return {"capture": charge_unprobed(invoice_id, amount_cents)}


@DBOS.workflow()
def pay_unguarded(invoice_id: str, amount_cents: int) -> Any:
    """Charge in a plain DBOS step."""
    return {"capture": charge_unguarded(invoice_id, amount_cents)}


WORKFLOWS = {"pay": pay, "pay_unprobed": pay_unprobed, "pay_unguarded": pay_unguarded}


def launch() -> None:
    """Configure and launch DBOS; the launch recovers what this executor left pending."""
    config: DBOSConfig = {
        "name": "effectguard-tests",
        "system_database_url": SYSTEM_DB,
        # Recovery on launch takes the workflows of this executor id and application version;
        # both are fixed, so a relaunched process recovers what the killed one left.
        "application_version": "effectguard-tests-1",
        "executor_id": "local",
        "notification_listener_polling_interval_sec": 0.1,
    }
    if SCHEMA:
        config["dbos_system_schema"] = SCHEMA
    DBOS(config=config)
    DBOS.launch()


def main(argv: list[str]) -> int:
    """``start WORKFLOW WORKFLOW_ID INVOICE AMOUNT`` or ``recover WORKFLOW_ID``."""
    launch()
    if argv[0] == "start":
        name, workflow_id, invoice_id, amount = argv[1:]
        with SetWorkflowID(workflow_id):
            handle = DBOS.start_workflow(WORKFLOWS[name], invoice_id, int(amount))
    else:
        handle = DBOS.retrieve_workflow(argv[1])
    result = handle.get_result(polling_interval_sec=0.1)
    print("RESULT " + json.dumps(result), flush=True)
    DBOS.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
