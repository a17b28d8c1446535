"""Approvals under faults, in every adapter: racing resumes, a SIGKILL.

One approval is one send: the fenced PREPARED -> DISPATCHED write consumes it,
so of three processes resuming the same paused run together one sends and the
others replay; and a process killed while its approved refund is in flight
leaves a fresh one to find it at the provider, never to send it again. Every
test counts effects at the fake provider's file, which deduplicates nothing,
on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from approval_fault_child import OPERATION
from extras_support import import_extra
from fault_children import TIMEOUT, kill_after_report, race

from effectguard import EffectStatus, open_ledger
from effectguard.adapters import APPROVAL_KIND
from effectguard.testkit import FakePaymentProvider

CHILD = Path(__file__).with_name("approval_fault_child.py")
FRAMEWORKS = {"lg": "langgraph", "agents": "agents", "pai": "pydantic_ai", "mcp": "mcp"}
EXTRAS = {"lg": "langgraph", "agents": "openai-agents", "pai": "pydantic-ai", "mcp": "mcp"}


@pytest.fixture(params=sorted(FRAMEWORKS))
def framework(request: pytest.FixtureRequest) -> str:
    """The adapter under test; skipped when its extra is not installed (a failure in CI)."""
    name = str(request.param)
    import_extra(FRAMEWORKS[name], EXTRAS[name])
    return name


def child(framework: str, phase: str, workdir: Path, target: str, *option: str) -> dict[str, Any]:
    """Run one phase in its own process to its end; its report."""
    done = subprocess.run(
        [sys.executable, str(CHILD), framework, phase, str(workdir), target, *option],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def paused_and_approved(framework: str, workdir: Path, target: str) -> None:
    """Pause on the refund's approval in one process, approve it in another: nothing sent."""
    paused = child(framework, "pause", workdir, target)
    if framework == "mcp":
        assert (paused["is_error"], paused["kind"]) == (True, APPROVAL_KIND)
    else:
        waits = {"lg": lambda: len(paused["paused"]), "pai": lambda: paused["deferred"]}
        assert waits.get(framework, lambda: paused["interruptions"])() == 1
    approved = child(framework, "approve", workdir, target)
    assert approved == (
        {"decisions": [[OPERATION, "PREPARED"]]}
        if framework == "agents"
        else {"status": "PREPARED"}
    )
    assert FakePaymentProvider(path=workdir / "payments.db").committed() == 0


def assert_done(framework: str, reported: dict[str, Any]) -> dict[str, Any]:
    """The resume finished with the refund's output (sent or replayed); that output."""
    if framework == "lg":
        from lg_world import FINAL  # noqa: PLC0415 - imports langgraph, which may be absent

        assert reported["paused"] == []
        assert reported["final"] == FINAL
        output = json.loads(reported["refund"])
    elif framework == "agents":
        assert (reported["final"], reported["interruptions"]) == ("Refunded INV-9.", 0)
        output = json.loads(reported["sent"]["call-1"])
    elif framework == "pai":
        assert (reported["final"], reported["waiting"]) == ("done: call-1=success", [])
        output = reported["sent"]["call-1"]
    else:
        assert reported["is_error"] is False
        output = reported["output"]
    assert output["amount_cents"] == -25_000
    return dict(output)


@pytest.mark.slow
def test_three_resumes_racing_after_one_approval_send_once(tmp_path, ledger_target, framework):
    """Released together: one sends, the others wait for it and replay; one effect."""
    paused_and_approved(framework, tmp_path, ledger_target)
    resume = [str(CHILD), framework, "resume", str(tmp_path), ledger_target, "race"]

    outputs = [assert_done(framework, done) for done in race(tmp_path, [resume] * 3)]

    payments = FakePaymentProvider(path=tmp_path / "payments.db")
    assert payments.committed() == 1
    assert payments.attempts() == 1
    assert outputs == [outputs[0]] * 3
    with open_ledger(ledger_target) as ledger:
        record = ledger.get(OPERATION)
        assert record is not None
        assert record.status is EffectStatus.CONFIRMED


@pytest.mark.slow
def test_a_resume_killed_mid_dispatch_is_finished_by_a_fresh_process_with_one_effect(
    tmp_path, ledger_target, framework
):
    """SIGKILL after the provider committed, before the ledger heard: the next process probes."""
    paused_and_approved(framework, tmp_path, ledger_target)
    held = kill_after_report(CHILD, framework, "resume", str(tmp_path), ledger_target, "hold")
    assert held == {"held": OPERATION}
    payments = FakePaymentProvider(path=tmp_path / "payments.db")
    assert payments.committed() == 1
    with open_ledger(ledger_target) as ledger:
        record = ledger.get(OPERATION)
        assert record is not None
        assert record.status is EffectStatus.DISPATCHED  # the approval is spent

    output = assert_done(framework, child(framework, "resume", tmp_path, ledger_target))

    assert output == payments.effects()[0]["response"]
    assert (payments.committed(), payments.attempts()) == (1, 1)
    if framework != "lg":  # the saved paused state, resumed once more elsewhere: a replay
        again = assert_done(framework, child(framework, "resume", tmp_path, ledger_target))
        assert again == output
        assert (payments.committed(), payments.attempts()) == (1, 1)
