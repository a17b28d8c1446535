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
from collections.abc import Callable
from pathlib import Path

import pytest
from extras_support import extras_required, import_extra

celery = import_extra("celery", "celery")

from effectguard import EffectStatus, open_ledger  # noqa: E402 - after the extra's check
from effectguard.adapters.celery import EffectTaskError  # noqa: E402 - ditto
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

    def __init__(self, directory: Path, broker: str, ledger: str | None = None) -> None:
        self.directory = directory
        self.broker = broker
        self.ledger = ledger or str(directory / "ledger.db")
        # Made here, before any worker opens it, so no two workers create the schema at once.
        open_ledger(self.ledger).close()
        self.queue = f"effectguard-test-{uuid.uuid4().hex}"
        self.env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "EG_CELERY_BROKER": BROKERS[broker][0],
            "EG_CELERY_QUEUE": self.queue,
            "EG_CELERY_DIR": str(directory),
            "EG_CELERY_LEDGER": self.ledger,
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

    def send(
        self, task: str, *args: object, task_id: str | None = None
    ) -> celery.result.AsyncResult:
        """Send ``task`` with ``args`` to this test's queue (as ``task_id``, when given)."""
        return self.client.send_task(task, args=args, queue=self.queue, task_id=task_id)

    def payments(self) -> FakePaymentProvider:
        """The provider every process shares: its counts are the ground truth."""
        return FakePaymentProvider(path=self.directory / "payments.db")

    def status(self, operation_id: str) -> EffectStatus:
        """The operation's status in the ledger the workers share."""
        ledger = open_ledger(self.ledger)
        try:
            record = ledger.get(operation_id)
            assert record is not None, f"{operation_id} is not in the ledger"
            return record.status
        finally:
            ledger.close()

    def log(self, name: str) -> str:
        """Worker ``name``'s log so far."""
        return (self.directory / f"{name}.log").read_text(errors="replace")

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
    """A shop on one broker, its workers sharing a SQLite ledger."""
    broker = request.param
    _require(BROKERS[broker][1], broker)
    _require(("127.0.0.1", 6379), "redis (the result backend)")
    shop = Shop(tmp_path, broker)
    yield shop
    shop.close()


@pytest.fixture(params=sorted(BROKERS))
def any_shop(request, tmp_path, backend, ledger_target):
    """A shop on one broker and one ledger backend: SQLite, or PostgreSQL (a schema of its own)."""
    broker = request.param
    _require(BROKERS[broker][1], broker)
    _require(("127.0.0.1", 6379), "redis (the result backend)")
    shop = Shop(tmp_path, broker, ledger_target)
    yield shop
    shop.close()


def _wait_for(path: Path, shop: Shop, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            pytest.fail(f"{path.name} never appeared\n{shop.logs()}")
        time.sleep(0.05)


def _wait_until(condition: Callable[[], bool], what: str, shop: Shop, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}, never\n{shop.logs()}")
        time.sleep(0.05)


def _succeeded(shop: Shop, task_id: str, *workers: str) -> int:
    """How many runs of ``task_id`` the named workers' logs say returned the first capture."""
    line = f"Task shop.charge[{task_id}] succeeded in"
    return sum(
        1
        for name in workers
        for logged in shop.log(name).splitlines()
        if line in logged and "'id': 'cap_000001'" in logged
    )


def _retried_in_progress(shop: Shop, task_id: str, worker: str) -> bool:
    """True once ``worker`` turned an EffectInProgress of ``task_id`` into a Celery retry."""
    log = shop.log(worker)
    return f"Task shop.charge[{task_id}] retry: Retry in" in log and "EffectInProgress" in log


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


def test_redelivered_task_after_sigkill_commits_once(any_shop):
    """A task whose worker died after the provider committed is finished by another: one effect."""
    shop = any_shop
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


def test_business_key_dedupes_a_redelivery_and_a_resubmission(any_shop):
    """Operation id from the invoice alone: a redelivery and a second message make one effect."""
    shop = any_shop
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


def test_a_second_worker_on_the_same_task_id_waits_its_turn_and_never_sends(any_shop):
    """A second worker on a task id whose first worker holds the lease retries: one effect.

    The first worker is inside the handler (the provider committed, its lease is
    live); a second message with the same task id reaches a second worker, as a
    resubmission with the task id does (on Redis the first message is also handed
    out again once the visibility timeout passes). The second run finds the lease,
    raises EffectInProgress at once (``wait_for_peer=0``) and Celery retries it;
    once the first has finished, the retry replays its outcome.
    """
    shop = any_shop
    shop.env["EG_CELERY_WAIT_FOR_PEER"] = "0"
    sent = shop.send("shop.charge", "INV-6", 1100)
    shop.start_worker("first")
    _wait_for(shop.directory / "committed", shop)
    shop.send("shop.charge", "INV-6", 1100, task_id=sent.id)
    shop.start_worker("second")
    _wait_until(
        lambda: _retried_in_progress(shop, sent.id, "second"), "the second worker retried", shop
    )
    assert shop.payments().committed() == 1
    (shop.directory / "gate").touch()
    _wait_until(
        # Celery's retry is a new message any free worker may take, the first one included.
        lambda: _succeeded(shop, sent.id, "first", "second") >= 2,
        "both messages of the task id finished",
        shop,
    )
    assert shop.payments().committed() == 1
    assert shop.status(f"capture:celery:shop.charge:{sent.id}") is EffectStatus.CONFIRMED
    assert sent.get(timeout=10)["output"]["invoice_id"] == "INV-6"


def test_two_workers_racing_on_a_redelivered_message_commit_once(any_shop):
    """SIGKILL after commit, then two workers take the task id at once: one reconciles, one effect.

    The message is redelivered and a second one with the same task id is sent;
    two new workers take one each. Whichever claims the dead worker's lease first
    reconciles (its probe is held open); the other finds that live lease, turns
    EffectInProgress into a Celery retry instead of sending, and replays the
    confirmed outcome once the probe has answered.
    """
    shop = any_shop
    shop.env["EG_CELERY_WAIT_FOR_PEER"] = "0"
    # Without it the new workers' sweeps would reconcile the operation before a task ran.
    shop.env["EG_CELERY_SWEEP"] = "off"
    (shop.directory / "hold-probe").touch()
    sent = shop.send("shop.charge", "INV-7", 1300)
    _kill_after_commit(shop)
    shop.send("shop.charge", "INV-7", 1300, task_id=sent.id)
    racers = {shop.start_worker(name).pid: name for name in ("second", "third")}
    _wait_for(shop.directory / "probing", shop)
    winner = racers[int((shop.directory / "probing").read_text())]
    (loser,) = set(racers.values()) - {winner}
    _wait_until(lambda: _retried_in_progress(shop, sent.id, loser), f"{loser} retried", shop)
    assert shop.payments().committed() == 1
    (shop.directory / "probe-gate").touch()
    _wait_until(
        lambda: _succeeded(shop, sent.id, winner, loser) >= 2,
        "both messages of the task id finished",
        shop,
    )
    assert shop.payments().committed() == 1
    assert shop.status(f"capture:celery:shop.charge:{sent.id}") is EffectStatus.CONFIRMED
    assert "EffectInProgress" not in shop.log(winner)
    assert sent.get(timeout=10)["output"]["invoice_id"] == "INV-7"


def test_the_caller_gets_an_error_naming_the_operation_through_the_result_backend(shop):
    """A task failed by an effectguard error: AsyncResult.get() raises EffectTaskError naming it.

    The second message reuses the invoice's operation id for another amount, an
    OperationConflictError in the worker; through the result backend the caller
    still learns which operation, and nothing was sent for it.
    """
    (shop.directory / "gate").touch()
    shop.start_worker("only")
    assert shop.send("shop.charge_invoice", "INV-8", 700).get(timeout=30)["invoice_id"] == "INV-8"
    conflicting = shop.send("shop.charge_invoice", "INV-8", 999)
    with pytest.raises(EffectTaskError) as raised:
        conflicting.get(timeout=30)
    assert raised.value.operation_id == "invoice:INV-8:capture"
    assert raised.value.error == "OperationConflictError"
    assert "use a new operation id for a different request" in str(raised.value)
    assert shop.payments().committed() == 1


def test_with_the_default_wait_a_second_worker_waits_for_the_first_outcome(shop):
    """Default wait_for_peer: the second run waits out the live lease; no retry, one effect."""
    sent = shop.send("shop.charge", "INV-9", 800)
    shop.start_worker("first")
    _wait_for(shop.directory / "committed", shop)
    shop.send("shop.charge", "INV-9", 800, task_id=sent.id)
    shop.start_worker("second")
    received = f"Task shop.charge[{sent.id}] received"
    _wait_until(lambda: received in shop.log("second"), "the second worker got the task", shop)
    # Let its claim find the live lease (milliseconds after receipt) before the first returns.
    time.sleep(1)
    (shop.directory / "gate").touch()
    _wait_until(
        lambda: _succeeded(shop, sent.id, "second") >= 1, "the second worker finished", shop
    )
    assert "retry: Retry in" not in shop.log("second")
    assert _succeeded(shop, sent.id, "first") >= 1
    assert shop.payments().committed() == 1
    assert shop.status(f"capture:celery:shop.charge:{sent.id}") is EffectStatus.CONFIRMED
