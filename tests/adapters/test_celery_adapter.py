"""The Celery adapter with real ``celery worker`` processes on Redis and RabbitMQ.

Each test starts workers (solo pool) of :mod:`tests.adapters.celery_shop` on a
queue of its own and counts the effects at the fake provider, whose file every
process shares. The kill tests SIGKILL the worker after the provider committed
and before the task returned; the broker redelivers (Redis after its
visibility timeout, RabbitMQ when the connection drops) and a second worker
finishes the task.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from extras_support import extras_required, import_extra

celery = import_extra("celery", "celery")

from effectguard import EffectStatus, open_ledger  # noqa: E402 - after the extra's check
from effectguard.testkit import FakePaymentProvider  # noqa: E402 - ditto

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
VISIBILITY_TIMEOUT = 2  # as celery_shop sets it
RESULTS = "redis://127.0.0.1:6379/1"
BROKERS = {
    "redis": ("redis://127.0.0.1:6379/0", ("127.0.0.1", 6379)),
    "rabbitmq": ("amqp://guest:guest@127.0.0.1:5672//", ("127.0.0.1", 5672)),
}


def _require(address: tuple[str, int], what: str) -> None:
    try:
        socket.create_connection(address, timeout=1).close()
    except OSError as exc:
        reason = f"{what} is not reachable at {address[0]}:{address[1]} ({exc})"
        if extras_required():
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)


class Shop:
    """One test's queue, directory and workers; the client app sends by task name."""

    def __init__(self, directory: Path, broker: str) -> None:
        self.directory = directory
        self.broker = broker
        self.queue = f"effectguard-test-{uuid.uuid4().hex}"
        self.env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "EG_CELERY_BROKER": BROKERS[broker][0],
            "EG_CELERY_QUEUE": self.queue,
            "EG_CELERY_DIR": str(directory),
        }
        self.client = celery.Celery("client", broker=BROKERS[broker][0], backend=RESULTS)
        self.client.conf.broker_transport_options = {"visibility_timeout": VISIBILITY_TIMEOUT}
        self.workers: list[subprocess.Popen[bytes]] = []

    def start_worker(self, name: str, pool: str = "solo") -> subprocess.Popen[bytes]:
        """Start a worker named ``name`` (solo, or prefork with two children), logging to a file."""
        with (self.directory / f"{name}.log").open("wb") as log:
            worker = subprocess.Popen(
            [
                sys.executable, "-m", "celery", "-A", "tests.adapters.celery_shop", "worker",
                "--pool", pool, "--concurrency", "1" if pool == "solo" else "2",
                "-Q", self.queue, "-n", f"{name}@%h",
                "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "info",
            ],
            cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.workers.append(worker)
        return worker

    def send(self, task: str, *args: object) -> celery.result.AsyncResult:
        """Send ``task`` with ``args`` to this test's queue."""
        return self.client.send_task(task, args=args, queue=self.queue)

    def payments(self) -> FakePaymentProvider:
        """The provider every process shares: its counts are the ground truth."""
        return FakePaymentProvider(path=self.directory / "payments.db")

    def status(self, operation_id: str) -> EffectStatus:
        """The operation's status in the ledger the workers share."""
        ledger = open_ledger(str(self.directory / "ledger.db"))
        try:
            record = ledger.get(operation_id)
            assert record is not None, f"{operation_id} is not in the ledger"
            return record.status
        finally:
            ledger.close()

    def logs(self) -> str:
        """The tail of every worker's log, for a failure message."""
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}"
            for path in sorted(self.directory.glob("*.log"))
        )

    def close(self) -> None:
        """Kill the workers still running; close the client."""
        for worker in self.workers:
            if worker.poll() is None:
                worker.kill()
            worker.wait(timeout=10)
        self.client.close()


@pytest.fixture(params=sorted(BROKERS))
def shop(request, tmp_path):
    broker = request.param
    _require(BROKERS[broker][1], broker)
    _require(("127.0.0.1", 6379), "redis (the result backend)")
    shop = Shop(tmp_path, broker)
    yield shop
    shop.close()


def _wait_for(path: Path, shop: Shop, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            pytest.fail(f"{path.name} never appeared\n{shop.logs()}")
        time.sleep(0.05)


def _kill_after_commit(shop: Shop) -> None:
    """Wait until the first worker's provider committed, SIGKILL it, open the gate."""
    first = shop.start_worker("first")
    _wait_for(shop.directory / "committed", shop)
    assert shop.payments().committed() == 1
    os.kill(first.pid, signal.SIGKILL)
    first.wait(timeout=10)
    (shop.directory / "gate").touch()
    if shop.broker == "redis":
        # Redis hands an unacknowledged message out again once it is older than the visibility
        # timeout; a worker scans for such messages as it starts, so start it after that.
        time.sleep(VISIBILITY_TIMEOUT + 0.5)


def test_redelivered_task_after_sigkill_commits_once(shop):
    """A task whose worker died after the provider committed is finished by another: one effect."""
    sent = shop.send("shop.charge", "INV-1", 1200)
    _kill_after_commit(shop)
    shop.start_worker("second")
    try:
        value = sent.get(timeout=30)
    except Exception:
        pytest.fail(f"the redelivered task did not finish\n{shop.logs()}")
    assert value["task_id"] == sent.id
    assert value["output"]["invoice_id"] == "INV-1"
    assert shop.payments().committed() == 1
    operation = f"capture:celery:shop.charge:{sent.id}"
    assert shop.status(operation) is EffectStatus.CONFIRMED
    # Both workers ran the recovery sweep when they were ready.
    assert len((shop.directory / "sweeps").read_text().splitlines()) == 2


def test_business_key_dedupes_a_redelivery_and_a_resubmission(shop):
    """Operation id from the invoice alone: a redelivery and a second message make one effect."""
    sent = shop.send("shop.charge_invoice", "INV-2", 700)
    _kill_after_commit(shop)
    again = shop.send("shop.charge_invoice", "INV-2", 700)
    shop.start_worker("second")
    try:
        first_value, second_value = sent.get(timeout=30), again.get(timeout=30)
    except Exception:
        pytest.fail(f"the tasks did not finish\n{shop.logs()}")
    assert first_value == second_value
    assert shop.payments().committed() == 1
    assert shop.status("invoice:INV-2:capture") is EffectStatus.CONFIRMED


def test_quarantined_outcome_is_a_custom_state_never_a_retry(shop):
    """A lost acknowledgement, no probe: EFFECT_UNCONFIRMED with the operator's command."""
    (shop.directory / "gate").touch()
    sent = shop.send("shop.charge_unprobed", "INV-3", 900)
    shop.start_worker("only")
    deadline = time.monotonic() + 30
    while sent.state != "EFFECT_UNCONFIRMED":
        if time.monotonic() > deadline:
            pytest.fail(f"state {sent.state}, never EFFECT_UNCONFIRMED\n{shop.logs()}")
        time.sleep(0.1)
    info = sent.info
    operation = f"capture-unprobed:celery:shop.charge_unprobed:{sent.id}"
    assert info["operation_id"] == operation
    assert info["status"] == "QUARANTINED"
    assert "agent-effect-ops --db" in info["operator_command"]
    assert "authorize-retry" in info["operator_command"]
    # Rejected without requeue: past the visibility timeout nothing has run it again.
    time.sleep(3)
    assert sent.state == "EFFECT_UNCONFIRMED"
    assert shop.payments().committed() == 1
    assert shop.status(operation) is EffectStatus.QUARANTINED


def test_without_a_result_backend_an_unconfirmed_effect_is_rejected_for_good(shop):
    """No backend to hold the state: the message is rejected without requeue, never run again."""
    shop.env["EG_CELERY_BACKEND"] = "none"
    (shop.directory / "gate").touch()
    sent = shop.send("shop.charge_unprobed", "INV-4", 900)
    shop.start_worker("only")
    operation = f"capture-unprobed:celery:shop.charge_unprobed:{sent.id}"
    log = shop.directory / "only.log"
    deadline = time.monotonic() + 30
    while "celery.exceptions.Reject" not in log.read_text(errors="replace"):
        if time.monotonic() > deadline:
            pytest.fail(f"the message was never rejected\n{shop.logs()}")
        time.sleep(0.1)
    assert f"waits on operation {operation!r}" in log.read_text()
    time.sleep(VISIBILITY_TIMEOUT + 1)
    assert shop.payments().committed() == 1
    assert shop.status(operation) is EffectStatus.QUARANTINED
    # One run only: the task's warning (which names the operation) was logged once.
    assert log.read_text().count(f"celery task shop.charge_unprobed[{sent.id}]") == 1


def test_a_prefork_child_killed_after_commit_is_requeued_and_commits_once(shop):
    """Prefork: SIGKILL the child mid-task; reject_on_worker_lost requeues; one effect."""
    sent = shop.send("shop.charge", "INV-5", 1500)
    worker = shop.start_worker("prefork", pool="prefork")
    marker = shop.directory / "committed"
    _wait_for(marker, shop)
    child = int(marker.read_text())
    assert child != worker.pid
    os.kill(child, signal.SIGKILL)
    (shop.directory / "gate").touch()
    try:
        value = sent.get(timeout=30)
    except Exception:
        pytest.fail(f"the requeued task did not finish\n{shop.logs()}")
    assert value["task_id"] == sent.id
    assert shop.payments().committed() == 1
    assert shop.status(f"capture:celery:shop.charge:{sent.id}") is EffectStatus.CONFIRMED
    assert worker.poll() is None, "the worker itself survived its child"
