"""An agent refunds an order; above a limit a person approves that exact refund first.

The story, each step in its own process state, as in production:

1. The agent asks for two refunds: 12.00 goes through at once; 250.00 is over
   the limit, so it is recorded, bound to its exact arguments, and nothing is
   sent. The run waits on it.
2. An operator reads the request and approves it through the audited CLI
   (``agent-effect-ops approve ... --expires-in 1h``), a separate process.
3. The run resumes: the approved refund is sent once, and replays thereafter.

To use this with your own provider, change ``Refunds.refund`` to call your
refund API (forwarding ``idempotency_key``), and ``LIMIT_CENTS`` to your policy.
Approvals come only from your trusted channel (the CLI, the console, the
ledger API), never from the model or from a tool argument. Run:
``python recipes/approval_refund.py``; it exits non-zero unless the provider
holds exactly the two refunds and nothing was sent before the approval.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from effectguard import INJECTED, EffectExecutor, SQLiteEffectLedger, effect
from effectguard.runtime import (
    AgentRuntime,
    RunResult,
    RunState,
    ScriptedModel,
    SQLiteCheckpointStore,
    ToolCall,
    ToolRegistry,
)
from effectguard.testkit import FakePaymentProvider

RUN_ID = "refund-ORD-7"
LIMIT_CENTS = 100_00
BIG = "refund:ORD-7"


class Refunds:
    """The refund tool the agent may use, bound to one provider client."""

    def __init__(self, provider: FakePaymentProvider) -> None:
        self.provider = provider

    @effect(
        name="shop.refund",
        operation_id="refund:{order_id}",
        idempotency_key="refund:{order_id}",
        requires_approval=lambda a: a["amount_cents"] > LIMIT_CENTS,
    )
    def refund(
        self, order_id: str, amount_cents: int, *, idempotency_key: str = INJECTED
    ) -> dict[str, Any]:
        """Refund an order to the customer's card.

        Args:
            order_id: The order to refund, for example "ORD-7".
            amount_cents: The amount to refund, in cents.
            idempotency_key: Supplied by the executor, the same for every attempt
                (never shown to the model).
        """
        return self.provider.capture(order_id, -amount_cents, idempotency_key=idempotency_key)


def script() -> ScriptedModel:
    """The model's side: two refunds in one turn, then a summary."""
    return ScriptedModel(
        [
            [
                ToolCall("call-1", "refund", {"order_id": "ORD-6", "amount_cents": 1200}),
                ToolCall("call-2", "refund", {"order_id": "ORD-7", "amount_cents": 25000}),
            ],
            "both refunds are done",
        ]
    )


def open_runtime(workdir: Path, provider: FakePaymentProvider) -> tuple[AgentRuntime, Any]:
    """Build everything a process needs from the files in ``workdir``."""
    ledger = SQLiteEffectLedger(workdir / "ledger.db")
    checkpoints = SQLiteCheckpointStore(workdir / "runs.db")
    runtime = AgentRuntime(
        script(),
        ToolRegistry.discover(Refunds(provider)),
        EffectExecutor(ledger),
        checkpoints=checkpoints,
    )

    def close() -> None:
        checkpoints.close()
        ledger.close()

    return runtime, close


def say(text: str) -> None:
    """Print one line of the narrative."""
    print(f"  {text}")


def describe(result: RunResult) -> str:
    """One line about a run result."""
    if result.state is RunState.WAITING:
        return f"WAITING on {', '.join(map(str, result.waiting_on))}"
    if result.state is RunState.COMPLETED:
        return f"COMPLETED with final answer {result.final!r}"
    return f"{result.state.value}: {result.error}"


def operator(workdir: Path, *args: str) -> str:
    """Run ``agent-effect-ops`` on the ledger, as an operator at a terminal would."""
    script_path = shutil.which("agent-effect-ops", path=str(Path(sys.executable).parent))
    command = [script_path] if script_path else [sys.executable, "-m", "effectguard.cli.ops"]
    done = subprocess.run(  # noqa: S603 - our own console script, with arguments we wrote
        [*command, "--db", str(workdir / "ledger.db"), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if done.returncode != 0:
        msg = f"agent-effect-ops {args[0]} failed: {done.stderr.strip()}"
        raise RuntimeError(msg)
    return done.stdout


def main(workdir: Path) -> int:
    """Run the story; return the exit status."""
    provider = FakePaymentProvider(idempotency_guaranteed=False, path=workdir / "provider.db")

    print("1. The agent asks to refund 12.00 for ORD-6 and 250.00 for ORD-7.")
    runtime, close = open_runtime(workdir, provider)
    first = runtime.start(RUN_ID, "Refund ORD-6 (12.00) and ORD-7 (250.00).")
    close()
    say(f"run: {describe(first)}")
    say(f"the provider holds {provider.committed()} refund(s): the small one only")
    if first.state is not RunState.WAITING or provider.committed() != 1:
        print("FAIL: the refund over the limit must wait, unsent")
        return 1

    print("2. An operator reads the request, then approves exactly it for one hour.")
    for line in operator(workdir, "list", "--status", "awaiting_approval").splitlines():
        say(line)
    approved = operator(
        workdir,
        "approve",
        BIG,
        "--actor",
        "oncall",
        "--reason",
        "the customer returned the goods",
        "--evidence-reference",
        "TICKET-88",
        "--expires-in",
        "1h",
    )
    say(approved.strip())
    say(f"the provider still holds {provider.committed()} refund(s): approving sends nothing")

    print("3. The run resumes in a fresh process state.")
    runtime, close = open_runtime(workdir, provider)
    second = runtime.resume(RUN_ID)
    again = runtime.resume(RUN_ID)
    events = [event.type.value for event in runtime.effect_executor.ledger.events(BIG)]
    close()
    say(f"ledger events of {BIG}: {' -> '.join(events)}")
    say(f"run: {describe(second)}")

    committed = provider.committed()
    print(f"4. The provider holds {committed} refund(s).")
    if second.state is not RunState.COMPLETED or again.state is not RunState.COMPLETED:
        print("FAIL: expected the run to complete once the refund was approved")
        return 1
    if committed != 2:  # noqa: PLR2004 - the two refunds the story makes
        print("FAIL: expected exactly two refunds")
        return 1
    print("OK: the big refund waited for a person, then was sent exactly once.")
    return 0


if __name__ == "__main__":
    # effectguard installs no log handler; this one prints each event it logs as one short line.
    logging.basicConfig(level=logging.WARNING, format="  log: %(levelname)s %(message).100s")
    logging.getLogger("effectguard").setLevel(logging.INFO)
    with tempfile.TemporaryDirectory(prefix="effectguard-approval-") as directory:
        sys.exit(main(Path(directory)))
