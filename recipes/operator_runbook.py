"""The 3 a.m. path: a quarantined payment, a re-probe, a checked confirmation, the run resumed.

An agent captured a payment; the provider committed it but the acknowledgement
was lost, and the provider's lookup API was down, so effectguard could not
tell whether the customer was charged. It quarantined the operation and the
agent run is WAITING. This script plays the on-call operator with the real
``agent-effect-ops`` commands, printing each one before it runs it:

1. ``runs list`` finds the waiting run and the QUARANTINED operation it waits on;
2. ``reprobe --dry-run`` asks the provider again (the lookup is still down:
   nothing changes, and nothing is ever sent);
3. the operator checks the provider's dashboard and ``confirm``s with the
   capture it shows; ``--tools`` checks the output against the tool's return
   type, so a careless ``"yes it went through"`` is refused first;
4. ``runs show`` says the run is now resumable, and ``start_or_resume``
   completes it: the agent is told the capture, and the provider holds one.

This file is also the tools module the commands import (``--tools
operator_runbook``): keep your tools importable the same way. Run:
``python recipes/operator_runbook.py [DIRECTORY]``; it exits non-zero unless
the run completes with exactly one capture.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from effectguard import (
    EffectExecutor,
    OperationConflictError,
    OutcomeProbeResult,
    effect,
    open_ledger,
)
from effectguard.runtime import (
    AgentRuntime,
    RunState,
    ScriptedModel,
    SQLiteCheckpointStore,
    ToolCall,
)
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan, Lookup


def _here() -> Path:
    """Where the provider's state, the ledger and the checkpoints live: one fresh directory."""
    if not os.environ.get("RUNBOOK_DIR"):
        given = sys.argv[1] if __name__ == "__main__" and len(sys.argv) > 1 else None
        if given is not None and not Path(given).is_dir():
            print(
                f"operator_runbook.py: {given!r} is not a directory: create it first, or run"
                " without an argument for a fresh temporary one",
                file=sys.stderr,
            )
            sys.exit(2)
        os.environ["RUNBOOK_DIR"] = given or tempfile.mkdtemp(prefix="runbook-")
    return Path(os.environ["RUNBOOK_DIR"])


HERE = _here()
RUN_ID = "pay-INV-7"
OPERATION = "invoice:INV-7:capture"

provider = FakePaymentProvider(
    idempotency_guaranteed=False, lookup=Lookup.STRONG, path=HERE / "provider.db"
)


def find_capture(invoice_id: str, amount_cents: int, *, idempotency_key: str) -> OutcomeProbeResult:
    """Look the capture up by its key; the lookup API is down while ``lookup-down`` exists."""
    del amount_cents  # the key identifies the request
    if (HERE / "lookup-down").exists():
        msg = "the provider's lookup API is down"
        raise ConnectionError(msg)
    return provider.probe({"invoice_id": invoice_id}, idempotency_key=idempotency_key)


@effect(
    name="runbook.capture",
    operation_id="invoice:{invoice_id}:capture",
    idempotency_key="capture:{invoice_id}",
    probe=find_capture,
    provider_operation_id="id",
)
def capture(invoice_id: str, amount_cents: int, *, idempotency_key: str) -> dict[str, Any]:
    """Capture the payment of an invoice."""
    return provider.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)


def drive() -> RunState:
    """Start the agent's run, or resume it: what the service does on every start."""
    ledger = open_ledger(HERE / "effects.db")
    checkpoints = SQLiteCheckpointStore(HERE / "runs.db")
    try:
        runtime = AgentRuntime(
            ScriptedModel(
                [ToolCall("c1", "capture", {"invoice_id": "INV-7", "amount_cents": 4200}), "Paid."]
            ),
            [capture],
            EffectExecutor(ledger, deadline=0),
            checkpoints=checkpoints,
        )
        return runtime.start_or_resume(RUN_ID, "Please pay invoice INV-7.").state
    finally:
        checkpoints.close()
        ledger.close()


def ops(*args: str, expect: int = 0) -> str:
    """Run ``agent-effect-ops --db effects.db ARGS`` as the operator would, and show it."""
    script = shutil.which("agent-effect-ops", path=str(Path(sys.executable).parent))
    command = [script] if script else [sys.executable, "-m", "effectguard.cli.ops"]
    line = ["agent-effect-ops", "--db", str(HERE / "effects.db"), *args]
    print("$", shlex.join(line))
    done = subprocess.run(  # noqa: S603 - our own console script, arguments written here
        [*command, *line[1:]],
        cwd=Path(__file__).parent,  # so that --tools operator_runbook imports this file
        env={**os.environ, "RUNBOOK_DIR": str(HERE)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    print(done.stdout + done.stderr)
    if done.returncode != expect:
        msg = f"exit {done.returncode}, expected {expect}: {done.stderr}"
        raise RuntimeError(msg)
    return done.stdout


def main() -> int:
    """Play the whole night; 0 when the run completed with exactly one capture."""
    (HERE / "lookup-down").touch()
    provider.faults = FaultPlan([Fault.LOSE_ACK])
    if drive() is not RunState.WAITING:
        return 1
    provider.faults = FaultPlan()
    checkpoints = str(HERE / "runs.db")
    ops("runs", "list", "--checkpoints", checkpoints)
    ops("reprobe", OPERATION, "--tools", "operator_runbook", "--dry-run")
    # The dashboard shows the capture; the lookup API is still down.
    charge = json.dumps(provider.find_capture("capture:INV-7"))
    audit = ["--actor", "oncall", "--reason", "dashboard shows the capture"]
    audit += ["--evidence-reference", "INC-7", "--tools", "operator_runbook"]
    confirm = ["confirm", OPERATION, "--provider-operation-id", "cap_000001", *audit]
    ops(*confirm, "--output-json", '"yes it went through"', expect=2)
    ops(*confirm, "--output-json", charge)
    ops("runs", "show", RUN_ID, "--checkpoints", checkpoints)
    state = drive()
    print("run", RUN_ID, state.value, "- captures at the provider:", provider.committed())
    return 0 if state is RunState.COMPLETED and provider.committed() == 1 else 1


if __name__ == "__main__":
    # effectguard installs no log handler; this one prints each event it logs as one short line.
    logging.basicConfig(level=logging.WARNING, format="  log: %(levelname)s %(message).100s")
    logging.getLogger("effectguard").setLevel(logging.INFO)
    try:
        sys.exit(main())
    except OperationConflictError as conflict:  # DIRECTORY holds an earlier, other request
        print(f"error: {conflict} (or run it in a new directory)", file=sys.stderr)
        sys.exit(1)
