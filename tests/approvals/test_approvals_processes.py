"""Approvals across real processes: the CLI approves, other processes call, race and die.

The approval is consumed by the fenced write that dispatches, so whatever
races after one approval sends once; a process SIGKILLed after taking the
approval leaves an operation the next process settles without a second send.
Every test counts the captures at the fake provider (a file all processes share).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from effectguard import EffectStatus, EventType, open_ledger
from effectguard.testkit import FakePaymentProvider
from tests.support import wait_until

pytestmark = pytest.mark.slow

OP = "refund:INV-9"
AUDIT = ("--actor", "alice", "--reason", "the customer asked", "--evidence-reference", "T-1")

_TOOLS = '''
"""A refund that needs approval; its handler can be held before it sends (file `hold`)."""
import time
from pathlib import Path

from effectguard import effect
from effectguard.testkit import FakePaymentProvider, Lookup

HERE = Path(__file__).parent
provider = FakePaymentProvider(
    idempotency_guaranteed=False, lookup=Lookup.STRONG, path=HERE / "provider.db"
)


def find_refund(invoice_id: str, amount_cents: int, *, idempotency_key: str):
    return provider.probe({"invoice_id": invoice_id}, idempotency_key=idempotency_key)


@effect(
    name="billing.refund",
    operation_id="refund:{invoice_id}",
    idempotency_key="refund:{invoice_id}",
    probe=find_refund,
    requires_approval=True,
    lease=2.0,
)
def refund(invoice_id: str, amount_cents: int, *, idempotency_key: str) -> dict:
    """Refund an invoice."""
    if (HERE / "hold").exists():
        (HERE / "entered").touch()
        while (HERE / "hold").exists():
            time.sleep(0.01)
    return provider.capture(invoice_id, -amount_cents, idempotency_key=idempotency_key)
'''

_CALLER = '''
"""Call the refund once (after the file `go` appears, if asked to wait); print the outcome."""
import json
import sys
import time
from pathlib import Path

from effectguard import EffectAwaitingApproval, EffectExecutor, open_ledger, use_executor

import approval_tools

if sys.argv[2] == "wait":
    while not Path("go").exists():
        time.sleep(0.005)
ledger = open_ledger(sys.argv[1])
with use_executor(EffectExecutor(ledger, wait_for_peer=30)):
    try:
        output = approval_tools.refund("INV-9", 25_000)
    except EffectAwaitingApproval:
        output = "awaiting"
ledger.close()
print(json.dumps(output))
'''


class Site:
    """A directory with the tools, the caller and the provider's file, over one ledger."""

    def __init__(self, directory: Path, target: str) -> None:
        self.directory = directory
        self.target = target
        (directory / "approval_tools.py").write_text(textwrap.dedent(_TOOLS), encoding="utf-8")
        (directory / "caller.py").write_text(textwrap.dedent(_CALLER), encoding="utf-8")

    def committed(self) -> int:
        """Refunds the provider holds (read from the file every process writes)."""
        path = self.directory / "provider.db"
        if not path.exists():
            return 0
        return FakePaymentProvider(idempotency_guaranteed=False, path=path).committed()

    def caller(self, *, wait: bool = False) -> subprocess.Popen[str]:
        """Start a process that calls the refund once."""
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(self.directory), *sys.path])}
        return subprocess.Popen(
            [sys.executable, "caller.py", self.target, "wait" if wait else "now"],
            cwd=self.directory,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def call(self) -> Any:
        """Call the refund in a new process; what it returned (or "awaiting")."""
        return finish(self.caller())

    def ops(self, *args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
        """Run the installed ``agent-effect-ops`` on the ledger; check the exit code."""
        script = shutil.which("agent-effect-ops", path=str(Path(sys.executable).parent))
        assert script is not None
        done = subprocess.run(
            [script, "--db", self.target, *args],
            cwd=self.directory,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
        return done

    def state(self) -> tuple[EffectStatus, list[EventType]]:
        """The operation's status and the types of its events."""
        ledger = open_ledger(self.target)
        try:
            record = ledger.get(OP)
            assert record is not None
            return record.status, [event.type for event in ledger.events(OP)]
        finally:
            ledger.close()


def finish(child: subprocess.Popen[str]) -> Any:
    """Wait for a caller; what it printed."""
    out, err = child.communicate(timeout=90)
    assert child.returncode == 0, err
    return json.loads(out)


@pytest.fixture
def site(tmp_path: Path, ledger_target: str) -> Site:
    """The approval tools over this test's ledger."""
    return Site(tmp_path, ledger_target)


def test_approved_from_the_cli_and_sent_by_another_process_once(site: Site) -> None:
    """Process A asks, the CLI approves, process B sends once, process C replays."""
    assert site.call() == "awaiting"
    assert site.call() == "awaiting"
    listed = site.ops("list", "--status", "awaiting_approval").stdout
    assert OP in listed
    assert site.committed() == 0

    done = site.ops("approve", OP, *AUDIT, "--expires-in", "1h")

    assert f"approved {OP!r}: AWAITING_APPROVAL -> PREPARED" in done.stdout
    sent = site.call()
    assert sent["amount_cents"] == -25_000
    assert site.call() == sent
    assert site.committed() == 1
    assert site.ops("verify").returncode == 0


def test_three_processes_racing_after_one_approval_send_once(site: Site) -> None:
    """One approval, three callers released at once: one capture, all three see it."""
    assert site.call() == "awaiting"
    site.ops("approve", OP, *AUDIT)
    children = [site.caller(wait=True) for _ in range(3)]
    (site.directory / "go").touch()
    outputs = [finish(child) for child in children]

    assert site.committed() == 1
    assert all(output == outputs[0] for output in outputs), outputs
    status, events = site.state()
    assert status is EffectStatus.CONFIRMED
    assert events.count(EventType.DISPATCHED) == 1


@pytest.mark.parametrize("committed", [False, True], ids=["before-send", "after-send"])
def test_sigkill_after_taking_the_approval_then_a_fresh_process_sends_once(
    site: Site, committed: bool
) -> None:
    """Killed holding the approved dispatch; the next process probes and settles, one capture."""
    assert site.call() == "awaiting"
    site.ops("approve", OP, *AUDIT)
    (site.directory / "hold").touch()
    child = site.caller()
    wait_until(lambda: (site.directory / "entered").exists() or child.poll() is not None, 30)
    assert child.poll() is None, child.communicate()
    if committed:  # the send reaches the provider; only the answer dies with the process
        FakePaymentProvider(
            idempotency_guaranteed=False, path=site.directory / "provider.db"
        ).capture("INV-9", -25_000, idempotency_key="refund:INV-9")
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=30)
    (site.directory / "hold").unlink()
    assert site.state()[0] is EffectStatus.DISPATCHED

    output = site.call()

    assert output["amount_cents"] == -25_000
    assert site.committed() == 1
    status, events = site.state()
    assert status is EffectStatus.CONFIRMED
    assert EventType.OPERATOR_APPROVED in events
    assert site.call() == output
    assert site.committed() == 1


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (("approve", "refund:nope", *AUDIT), 1, "no operation"),
        (("approve", OP, "--actor", "alice", "--reason", "r"), 2, "--evidence-reference"),
        (("approve", OP, *AUDIT, "--expires-in", "soon"), 2, "is not a duration"),
        (("approve", OP, *AUDIT, "--expires-in", "0s"), 2, "no time at all"),
        (("approve", OP, *AUDIT, "--expires-in", "99999w"), 2, "longer than ten years"),
        (("approve", OP, *AUDIT, "--expect-events", "7"), 1, "changed since you looked"),
        (("deny", OP, *AUDIT, "--expect-head", "00" * 8), 1, "changed since you looked"),
        (
            ("confirm", OP, "--output-json", "{}", "--provider-operation-id", "x", *AUDIT),
            1,
            "cannot confirm",
        ),
        (("authorize-retry", OP, *AUDIT), 1, "cannot authorize a retry"),
    ],
)
def test_bad_requests_are_one_line_and_change_nothing(
    site: Site, args: tuple[str, ...], code: int, says: str
) -> None:
    """Refusals name the problem in one line, exit non-zero, and the ledger is unchanged."""
    assert site.call() == "awaiting"
    before = site.state()

    done = site.ops(*args, code=code)

    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert says in lines[0]
    assert site.state() == before
    assert site.committed() == 0


def test_deny_from_the_cli_means_never_sent(site: Site) -> None:
    """Denied: every later call in any process is refused; the provider holds nothing."""
    assert site.call() == "awaiting"
    done = site.ops("deny", OP, *AUDIT)
    assert f"denied {OP!r}: AWAITING_APPROVAL -> REJECTED" in done.stdout
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site.directory), *sys.path])}
    refused = subprocess.run(
        [sys.executable, "caller.py", site.target, "now"],
        cwd=site.directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == 1
    assert "EffectRejected" in refused.stderr
    assert "denied by alice" in refused.stderr
    assert site.committed() == 0
