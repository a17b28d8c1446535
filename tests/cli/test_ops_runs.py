"""Waiting runs: ``runs list|show`` through the console script, and ``start_or_resume``.

The 3 a.m. path end to end: a capture whose acknowledgement was lost while the
provider's lookup was down leaves a run WAITING on a QUARANTINED operation;
the operator finds the run, re-probes the operation, and the run resumes to
completion with exactly one capture at the provider.
"""

from __future__ import annotations

import types
from pathlib import Path

import pytest
from recovery_support import AUDIT, OP, Site, make_site

from effectguard import EffectExecutor, EffectStatus, open_ledger
from effectguard.runtime import (
    AgentRuntime,
    RunState,
    ScriptedModel,
    SQLiteCheckpointStore,
    ToolCall,
)
from effectguard.testkit import Fault, FaultPlan

RUN = "run-3am"
CALL = ToolCall("call-1", "capture", {"invoice_id": "INV-9", "amount_cents": 1250})


@pytest.fixture
def site(tmp_path: Path, ledger_target: str) -> Site:
    """The tools module and provider state in this test's directory, over its ledger."""
    return make_site(tmp_path, ledger_target)


def _drive(site: Site, module: types.ModuleType, *, run: str = RUN) -> RunState:
    """start_or_resume the run in a fresh runtime (as a restarted service would)."""
    ledger = open_ledger(site.target)
    store = SQLiteCheckpointStore(site.directory / "runs.db")
    try:
        runtime = AgentRuntime(
            ScriptedModel([CALL, "captured"]),
            [module.capture],
            EffectExecutor(ledger),
            checkpoints=store,
        )
        return runtime.start_or_resume(run, "capture INV-9").state
    finally:
        store.close()
        ledger.close()


def _waiting_run(site: Site) -> types.ModuleType:
    module = site.module()
    site.probe_down(True)
    module.provider.faults = FaultPlan([Fault.LOSE_ACK])
    try:
        assert _drive(site, module) is RunState.WAITING
    finally:
        module.provider.faults = FaultPlan()
        site.probe_down(False)
    return module


def test_the_3am_path_find_the_run_reprobe_resume(site: Site) -> None:
    """Runs list shows the blocked run; a re-probe unblocks it; start_or_resume completes it."""
    module = _waiting_run(site)
    checkpoints = str(site.directory / "runs.db")

    listed = site.ops_json("runs", "list", "--checkpoints", checkpoints)
    assert [(r["run_id"], r["resumable"]) for r in listed] == [(RUN, False)]
    assert listed[0]["operations"] == [
        {"operation_id": OP, "status": "QUARANTINED", "found": True, "blocks": True}
    ]
    shown = site.ops("runs", "show", RUN, "--checkpoints", checkpoints)
    assert f"{OP} is QUARANTINED: resolve it" in shown.stdout

    site.ops("reprobe", OP, "--tools", "billing_tools")

    again = site.ops_json("runs", "show", RUN, "--checkpoints", checkpoints)
    assert again["resumable"] is True
    assert again["operations"][0]["status"] == "CONFIRMED"
    assert _drive(site, module) is RunState.COMPLETED
    assert site.provider.committed() == 1
    assert site.ops_json("runs", "list", "--checkpoints", checkpoints) == []
    completed = site.ops_json("runs", "list", "--checkpoints", checkpoints, "--status", "all")
    assert [(r["run_id"], r["state"]) for r in completed] == [(RUN, "COMPLETED")]


def test_a_rejected_operation_lets_its_run_finish_without_a_capture(site: Site) -> None:
    """An operator's reject unblocks the run too; the model is told, nothing is resent."""
    module = _waiting_run(site)

    site.ops("reject", OP, *AUDIT)

    assert _drive(site, module) is RunState.COMPLETED
    assert site.provider.committed() == 1  # the lost-ack capture only; never a second


def test_start_or_resume_starts_a_new_run_and_returns_a_finished_one(site: Site) -> None:
    """A new id starts; calling again returns the finished run, never RunExistsError."""
    module = site.module()

    assert _drive(site, module, run="run-new") is RunState.COMPLETED
    assert _drive(site, module, run="run-new") is RunState.COMPLETED
    assert site.provider.committed() == 1


def test_runs_list_refuses_a_missing_checkpoint_file_and_creates_none(site: Site) -> None:
    """A wrong --checkpoints path is one line, exit 1, and no file appears."""
    missing = site.directory / "nope.db"

    done = site.ops("runs", "list", "--checkpoints", str(missing), code=1)

    assert "does not exist" in done.stderr
    assert not missing.exists()
    done = site.ops("runs", "list", "--checkpoints", str(site.directory), code=1)
    assert "is a directory" in done.stderr


def test_runs_show_an_unknown_run_and_a_bad_state(site: Site) -> None:
    """An unknown run is exit 1; an unknown state is a usage error (exit 2)."""
    _waiting_run(site)
    checkpoints = str(site.directory / "runs.db")

    site.ops("runs", "show", "run-nope", "--checkpoints", checkpoints, code=1)
    done = site.ops("runs", "list", "--checkpoints", checkpoints, "--status", "sleepy", code=2)
    assert "unknown run state" in done.stderr


def test_runs_without_db_show_the_status_the_checkpoint_saw(site: Site) -> None:
    """Without --db the checkpoint's last view is shown (the ledger is not opened)."""
    _waiting_run(site)
    checkpoints = str(site.directory / "runs.db")
    import subprocess  # noqa: PLC0415 - beside its only use
    import sys  # noqa: PLC0415 - beside its only use

    script = Path(sys.executable).parent / "agent-effect-ops"
    done = subprocess.run(
        [str(script), "runs", "list", "--checkpoints", checkpoints, "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=site.directory,
    )
    assert done.returncode == 0, done.stderr
    assert '"status": "QUARANTINED"' in done.stdout
    assert EffectStatus.QUARANTINED.value in done.stdout
