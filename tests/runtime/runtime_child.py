"""A separate process that starts or resumes the payment run, for the restart tests.

Usage: python runtime_child.py start|resume WORKDIR --fault none|pending|crash-after-commit

Prints the RunResult as one JSON line (unless the provider kills this process).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from runtime_support import RUN, Payments, script

from effectguard import EffectExecutor, SQLiteEffectLedger
from effectguard.runtime import (
    AgentRuntime,
    JsonLinesAuditSink,
    JsonLinesTraceSink,
    SQLiteCheckpointStore,
    ToolRegistry,
)
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan

FAULTS = {
    "none": FaultPlan(),
    "pending": FaultPlan({1: Fault.PENDING}, pending_probes=1),
    "crash-after-commit": FaultPlan({1: Fault.CRASH_AFTER_COMMIT}),
}


def build(workdir: Path, fault: str) -> AgentRuntime:
    """The runtime a process builds from the files in ``workdir``."""
    provider = FakePaymentProvider(path=workdir / "provider.db", faults=FAULTS[fault])
    return AgentRuntime(
        script(),
        ToolRegistry.discover(Payments(provider)),
        # deadline=0: a pending effect makes the run wait instead of being re-probed now.
        EffectExecutor(SQLiteEffectLedger(workdir / "ledger.db"), deadline=0),
        checkpoints=SQLiteCheckpointStore(workdir / "runs.db"),
        trace=JsonLinesTraceSink(workdir / "trace.jsonl"),
        audit=JsonLinesAuditSink(workdir / "audit.jsonl"),
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["start", "resume"])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--fault", choices=sorted(FAULTS), default="none")
    options = parser.parse_args()
    runtime = build(options.workdir, options.fault)
    if options.command == "start":
        result = runtime.start(RUN, "Please pay invoice INV-1042.")
    else:
        result = runtime.resume(RUN)
    print(
        json.dumps(
            {
                "state": result.state.value,
                "final": result.final,
                "waiting_on": [str(item) for item in result.waiting_on],
                "steps": result.steps,
                "effects": {op: status.value for op, status in result.effects.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
