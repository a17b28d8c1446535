"""Operators' sweeps racing a live call on the same operation, in real processes.

A call is dispatching in another process (its handler held before the provider
commits, or looping over replays) while ``reprobe``, ``reconcile`` and
``prune`` run through the installed console script. The danger is concrete: a
probe asked mid-dispatch answers NOT_COMMITTED, and a sweep that believed it
would make the operation dispatchable again, so the held call and the next one
would each charge the card. Every test counts what the fake provider committed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from recovery_support import Site

from effectguard import EffectStatus, EventType, open_ledger
from tests.support import wait_until

pytestmark = pytest.mark.slow

OP = "invoice:INV-9:capture"
TOOLS = "racing_tools"

_TOOLS_SOURCE = '''
"""A capture whose handler can be held mid-dispatch (written by the racing tests)."""
import time
from pathlib import Path

from effectguard import effect
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan, Lookup

HERE = Path(__file__).parent
provider = FakePaymentProvider(
    idempotency_guaranteed=False, lookup=Lookup.STRONG, path=HERE / "provider.db"
)


def find_capture(invoice_id: str, amount_cents: int, *, idempotency_key: str):
    if (HERE / "hold-probe").exists():
        (HERE / "probing").touch()
        while (HERE / "hold-probe").exists():
            time.sleep(0.01)
    return provider.probe({"invoice_id": invoice_id}, idempotency_key=idempotency_key)


@effect(
    name="billing.capture",
    operation_id="invoice:{invoice_id}:capture",
    idempotency_key="capture:{invoice_id}",
    probe=find_capture,
    provider_operation_id="id",
)
def capture(invoice_id: str, amount_cents: int, *, idempotency_key: str) -> dict:
    """Capture a payment; while the file `hold` exists, wait before sending.

    With the file `lose-ack`, the provider commits and the answer is lost.
    """
    if (HERE / "lose-ack").exists():
        provider.faults = FaultPlan([Fault.LOSE_ACK])
    if (HERE / "hold").exists():
        (HERE / "entered").touch()
        while (HERE / "hold").exists():
            time.sleep(0.01)
    return provider.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)
'''

_CALLER_SOURCE = '''
"""Call the capture; print what each call ended as (one JSON line).

argv: the ledger, the number of calls (0: until 50 calls after the first
pruned one, or 50 after the file `stop` appears) and the replay cache's size.
After each call it touches `calling`, so a racing prune can start among them.
"""
import json
import sys
import time
from pathlib import Path

from effectguard import EffectExecutor, EffectPruned, open_ledger, use_executor

import racing_tools

ledger = open_ledger(sys.argv[1])
calls, cache = int(sys.argv[2]), int(sys.argv[3])
seen, after_stop = [], 0
deadline = time.monotonic() + 60
with use_executor(EffectExecutor(ledger, replay_cache=cache)):
    while time.monotonic() < deadline:
        try:
            result = racing_tools.capture.execute("INV-9", 1250)
        except EffectPruned:
            seen.append("pruned")
        else:
            seen.append("replayed" if result.replayed else result.status.value)
        Path("calling").touch()
        after_stop += Path("stop").exists()
        if len(seen) == calls or (not calls and 50 in (seen.count("pruned"), after_stop)):
            break
ledger.close()
print(json.dumps(seen))
'''


@pytest.fixture
def site(tmp_path: Path, ledger_target: str) -> Site:
    """The racing tools and a caller script in this test's directory, over its ledger."""
    (tmp_path / f"{TOOLS}.py").write_text(textwrap.dedent(_TOOLS_SOURCE), encoding="utf-8")
    (tmp_path / "caller.py").write_text(textwrap.dedent(_CALLER_SOURCE), encoding="utf-8")
    return Site(tmp_path, ledger_target)


def _caller(site: Site, calls: int = 1, cache: int = 10_000) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site.directory), *sys.path])}
    return subprocess.Popen(
        [sys.executable, "caller.py", site.target, str(calls), str(cache)],
        cwd=site.directory,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(child: subprocess.Popen[str]) -> list[str]:
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    return list(json.loads(out))


def _held_call(site: Site) -> subprocess.Popen[str]:
    """Start a call whose handler waits before the provider commits; return once it waits."""
    (site.directory / "hold").touch()
    child = _caller(site)
    wait_until(lambda: (site.directory / "entered").exists() or child.poll() is not None, 30)
    assert child.poll() is None, child.communicate()
    return child


def _state(site: Site) -> tuple[EffectStatus, list[EventType]]:
    ledger = open_ledger(site.target)
    try:
        record = ledger.get(OP)
        assert record is not None
        return record.status, [event.type for event in ledger.events(OP)]
    finally:
        ledger.close()


def test_reprobe_and_reconcile_leave_a_call_in_flight_alone(site: Site) -> None:
    """The probe would say NOT_COMMITTED mid-dispatch; no sweep acts on it: one capture."""
    child = _held_call(site)
    try:
        held = _state(site)
        assert held[0] is EffectStatus.DISPATCHED
        assert site.provider.committed() == 0  # the probe's honest answer now: not committed

        refused = site.ops("reprobe", OP, "--tools", TOOLS, code=1)
        swept = site.ops_json("reconcile", "--tools", TOOLS)
        forced = site.ops_json("reconcile", "--tools", TOOLS, "--status", "dispatched")

        assert "held by a live worker" in refused.stderr
        for report in (swept, forced):
            assert report["changed"] == 0
            assert OP not in [row["operation_id"] for row in report["probed"]]
        assert _state(site) == held  # nothing written while the call is live
    finally:
        (site.directory / "hold").unlink(missing_ok=True)
    assert _finish(child) == ["CONFIRMED"]
    status, events = _state(site)
    assert status is EffectStatus.CONFIRMED
    assert EventType.REPROBED not in events
    assert site.provider.committed() == 1
    # The agent's next call replays; a sweep now has nothing to do.
    assert _finish(_caller(site)) == ["replayed"]
    site.ops("reconcile", "--tools", TOOLS)
    assert site.provider.committed() == 1


def test_reconcile_leaves_a_call_reconciling_its_own_lost_ack_alone(site: Site) -> None:
    """The live call is probing its lost acknowledgement; a sweep meanwhile writes nothing."""
    (site.directory / "lose-ack").touch()
    (site.directory / "hold-probe").touch()
    child = _caller(site)
    try:
        wait_until(lambda: (site.directory / "probing").exists() or child.poll() is not None, 30)
        assert child.poll() is None, child.communicate()
        held = _state(site)
        assert held[0] is EffectStatus.RECONCILING
        assert site.provider.committed() == 1  # the capture landed; its answer did not

        swept = site.ops_json("reconcile", "--tools", TOOLS)
        refused = site.ops("reprobe", OP, "--tools", TOOLS, code=1)

        assert swept["changed"] == 0
        assert OP not in [row["operation_id"] for row in swept["probed"]]
        assert "held by a live worker" in refused.stderr
        assert _state(site) == held
    finally:
        (site.directory / "hold-probe").unlink(missing_ok=True)
    assert _finish(child) == ["CONFIRMED"]  # its own probe found the capture
    assert EventType.REPROBED not in _state(site)[1]
    assert site.provider.committed() == 1


def test_prune_keeps_a_call_in_flight_and_prunes_it_once_settled(site: Site) -> None:
    """A dispatching operation is never pruned; once confirmed it is, and is never sent again."""
    child = _held_call(site)
    try:
        done = site.ops_json("prune", "--older-than", "0s")
        assert done["pruned"] == []
        assert _state(site)[0] is EffectStatus.DISPATCHED
    finally:
        (site.directory / "hold").unlink(missing_ok=True)
    assert _finish(child) == ["CONFIRMED"]

    done = site.ops_json("prune", "--older-than", "0s")

    assert done["pruned"] == [OP]
    assert _finish(_caller(site)) == ["pruned"]
    assert site.provider.committed() == 1


def test_prune_racing_a_loop_of_replays_never_lets_one_send(site: Site) -> None:
    """Replays read from the ledger race its prune: each replays or is refused, none sends."""
    assert _finish(_caller(site)) == ["CONFIRMED"]
    (site.directory / "calling").unlink()
    child = _caller(site, calls=0, cache=0)  # every replay reads the ledger
    wait_until(lambda: (site.directory / "calling").exists() or child.poll() is not None, 30)
    done = site.ops_json("prune", "--older-than", "0s")
    seen = _finish(child)

    assert done["pruned"] == [OP]
    assert set(seen) == {"replayed", "pruned"}, sorted(set(seen))
    assert seen.count("pruned") == 50  # the loop ended on its count, not its deadline
    assert seen == sorted(seen, key=lambda outcome: outcome == "pruned")  # never back
    assert site.provider.committed() == 1


def test_a_process_that_cached_the_replay_keeps_replaying_after_another_prunes(
    site: Site,
) -> None:
    """As documented: its cache serves the right output, never a send; a new process is refused."""
    assert _finish(_caller(site)) == ["CONFIRMED"]
    (site.directory / "calling").unlink()
    child = _caller(site, calls=0)  # the default replay cache
    wait_until(lambda: (site.directory / "calling").exists() or child.poll() is not None, 30)
    assert site.ops_json("prune", "--older-than", "0s")["pruned"] == [OP]
    (site.directory / "stop").touch()
    seen = _finish(child)

    assert set(seen) == {"replayed"}
    assert _finish(_caller(site)) == ["pruned"]
    assert site.provider.committed() == 1
