"""The DBOS adapter with real DBOS processes, killed mid-step, on SQLite and on PostgreSQL.

Each test runs :mod:`tests.adapters.dbos_shop` in child processes and counts
the effects at the fake provider, whose file every process shares. DBOS's
system database and the effectguard ledger are both SQLite files, or both
schemas of their own in the test PostgreSQL database. A kill test SIGKILLs
the process inside the step after the provider committed and before DBOS
wrote the step's checkpoint; a fresh process launches DBOS, which recovers
the workflow and runs the step again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from extras_support import import_extra
from postgres_support import with_schema

dbos = import_extra("dbos", "dbos")

from effectguard import EffectStatus, open_ledger  # noqa: E402 - after the extra's check
from effectguard.adapters.dbos import (  # noqa: E402 - ditto
    PENDING_EVENT,
    RESOLVED_TOPIC,
    pending_effect,
)
from effectguard.testkit import FakePaymentProvider  # noqa: E402 - ditto

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


class Shop:
    """One test's databases, directory and processes."""

    def __init__(self, directory: Path, ledger: str, system_db: str, schema: str | None) -> None:
        self.directory = directory
        self.ledger = ledger
        self.system_db = system_db
        self.schema = schema
        self.env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "EG_DBOS_DIR": str(directory),
            "EG_DBOS_LEDGER": ledger,
            "EG_DBOS_SYSTEM_DB": system_db,
            "EG_DBOS_SCHEMA": schema or "",
        }
        self.processes: list[subprocess.Popen[bytes]] = []

    def run(self, name: str, *argv: str) -> subprocess.Popen[bytes]:
        """Start ``python -m tests.adapters.dbos_shop ARGV`` logging to ``NAME.log``."""
        with (self.directory / f"{name}.log").open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "tests.adapters.dbos_shop", *argv],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.processes.append(process)
        return process

    def result(self, name: str, process: subprocess.Popen[bytes], timeout: float = 40) -> object:
        """Wait for ``process`` to exit 0 and return the workflow result it printed."""
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{name} did not finish in {timeout} s\n{self.logs()}")
        assert code == 0, f"{name} exited {code}\n{self.logs()}"
        for line in (self.directory / f"{name}.log").read_text().splitlines():
            if line.startswith("RESULT "):
                return json.loads(line.removeprefix("RESULT "))
        pytest.fail(f"{name} printed no result\n{self.logs()}")

    def payments(self) -> FakePaymentProvider:
        """The provider every process shares: its counts are the ground truth."""
        return FakePaymentProvider(path=self.directory / "payments.db")

    def entries(self) -> list[str]:
        """Which step bodies started, in which process, in order."""
        path = self.directory / "entries"
        return path.read_text().splitlines() if path.exists() else []

    def operations(self) -> dict[str, EffectStatus]:
        """Every operation in the ledger the processes share, with its status."""
        ledger = open_ledger(self.ledger)
        try:
            return {record.operation_id: record.status for record in ledger.list_operations()}
        finally:
            ledger.close()

    def client(self) -> object:
        """A DBOS client on the system database, as another process of the application sees it."""
        return dbos.DBOSClient(
            system_database_url=self.system_db, dbos_system_schema=self.schema or "dbos"
        )

    def logs(self) -> str:
        """The tail of every process's log, for a failure message."""
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}"
            for path in sorted(self.directory.glob("*.log"))
        )

    def close(self) -> None:
        """Kill the processes still running."""
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=10)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def shop(request, tmp_path):
    if request.param == "sqlite":
        shop = Shop(
            tmp_path, str(tmp_path / "ledger.db"), f"sqlite:///{tmp_path / 'dbos.sqlite'}", None
        )
    else:
        url = request.getfixturevalue("postgres_url")
        schemas = request.getfixturevalue("postgres_schemas")
        # The same PostgreSQL database holds both: DBOS's system tables and the ledger, each in
        # a schema of this test's own.
        shop = Shop(tmp_path, with_schema(url, schemas()), url, schemas())
    yield shop
    shop.close()


def _wait_for(condition, shop: Shop, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} never happened\n{shop.logs()}")
        time.sleep(0.1)


def _kill_after_commit(shop: Shop, workflow: str, workflow_id: str) -> None:
    """Start ``workflow``, wait until the provider committed inside its step, SIGKILL it."""
    first = shop.run("first", "start", workflow, workflow_id, "INV-1", "1200")
    marker = shop.directory / "committed"
    _wait_for(marker.exists, shop, "the provider's commit")
    assert shop.payments().committed() == 1
    os.kill(first.pid, signal.SIGKILL)
    first.wait(timeout=10)


def test_a_workflow_recovered_after_sigkill_in_the_step_commits_once(shop):
    """Killed after the commit, before the checkpoint: DBOS re-runs the step; one effect."""
    _kill_after_commit(shop, "pay", "wf-pay")
    value = shop.result("second", shop.run("second", "recover", "wf-pay"))
    assert value == {
        "capture": {"id": "cap_000001", "status": "succeeded", "invoice_id": "INV-1",
                    "amount_cents": 1200},
        "workflow_id": "wf-pay",
    }  # fmt: skip
    # DBOS did run the step body again, in the new process: the re-run was real.
    entries = shop.entries()
    assert [entry.split()[0] for entry in entries] == ["charge", "charge"]
    assert entries[0].split()[1] != entries[1].split()[1]
    assert shop.payments().committed() == 1
    # The step is the workflow's first: its scope is (dbos:wf-pay, 1) in both processes.
    assert shop.operations() == {"capture:dbos:wf-pay:1": EffectStatus.CONFIRMED}


def test_a_plain_dbos_step_killed_after_commit_commits_twice(tmp_path):
    """The failure the adapter closes: the same kill with a plain DBOS step sends twice."""
    shop = Shop(
        tmp_path, str(tmp_path / "ledger.db"), f"sqlite:///{tmp_path / 'dbos.sqlite'}", None
    )
    try:
        _kill_after_commit(shop, "pay_unguarded", "wf-plain")
        value = shop.result("second", shop.run("second", "recover", "wf-plain"))
        assert value["capture"]["id"] == "cap_000002"
        assert shop.payments().committed() == 2
    finally:
        shop.close()


def _confirm_with_the_cli(shop: Shop, operation: str) -> None:
    """What an operator does once they saw the capture at the provider: agent-effect-ops confirm."""
    output = {"id": "cap_000001", "status": "succeeded", "invoice_id": "INV-9",
              "amount_cents": 900}  # fmt: skip
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "agent-effect-ops"), "--db", shop.ledger,
            "confirm", operation,
            "--output-json", json.dumps(output), "--provider-operation-id", "cap_000001",
            "--actor", "ops@example.com", "--reason", "capture seen in the dashboard",
            "--evidence-reference", "dashboard:cap_000001",
        ],
        cwd=ROOT, env=shop.env, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("restart", [False, True], ids=["same-process", "killed-while-waiting"])
def test_an_unconfirmed_effect_waits_durably_and_resumes_after_confirm(shop, restart):
    """Quarantined: the workflow waits (DBOS.recv), not fails; an operator confirms; one effect."""
    operation = "capture-unprobed:dbos:wf-wait:1"
    waiting = shop.run("first", "start", "pay_unprobed", "wf-wait", "INV-9", "900")
    _wait_for(
        lambda: shop.operations().get(operation) is EffectStatus.QUARANTINED,
        shop, "quarantine",
    )  # fmt: skip
    client = shop.client()
    try:
        _wait_for(
            lambda: client.get_event("wf-wait", PENDING_EVENT, timeout_seconds=0) is not None,
            shop, "the pending event",
        )  # fmt: skip
        pending = pending_effect(client.get_event("wf-wait", PENDING_EVENT, timeout_seconds=0))
        assert pending is not None
        assert pending.operation_id == operation
        assert pending.status is EffectStatus.QUARANTINED
        assert "agent-effect-ops --db" in pending.operator_command
        # It waits and re-checks (the wait is 0.5 s), but neither fails nor sends again.
        _wait_for(lambda: len(shop.entries()) >= 3, shop, "a re-check")
        assert waiting.poll() is None
        assert client.retrieve_workflow("wf-wait").get_status().status == "PENDING"
        assert shop.payments().committed() == 1
        if restart:
            os.kill(waiting.pid, signal.SIGKILL)
            waiting.wait(timeout=10)
        _confirm_with_the_cli(shop, operation)
        if restart:
            name, waiting = "second", shop.run("second", "recover", "wf-wait")
        else:
            name = "first"
            client.send("wf-wait", operation, RESOLVED_TOPIC)
        value = shop.result(name, waiting)
        assert value == {"capture": {"id": "cap_000001", "status": "succeeded",
                                     "invoice_id": "INV-9", "amount_cents": 900}}  # fmt: skip
        assert client.get_event("wf-wait", PENDING_EVENT, timeout_seconds=0) is None
    finally:
        client.destroy()
    assert shop.payments().committed() == 1
    assert shop.operations() == {operation: EffectStatus.CONFIRMED}
