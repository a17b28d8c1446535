"""The scenario registry and the environment every scenario runs in."""

from __future__ import annotations

import inspect
import os
import random
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from effectguard._contract import EffectContract
from effectguard._executor import EffectExecutor
from effectguard._executor._machine import seeded_jitter
from effectguard.ledger.sqlite import SQLiteEffectLedger
from effectguard.testkit.clock import ManualClock
from effectguard.testkit.fakes.base import FakeProvider, Lookup
from effectguard.testkit.fakes.payments import FakePaymentProvider
from effectguard.testkit.faults import FaultPlan
from effectguard.testkit.scenarios._report import Check, ScenarioReport

__all__ = [
    "SCENARIOS",
    "WAIT_SECONDS",
    "Scenario",
    "ScenarioEnv",
    "ScenarioError",
    "run_scenario",
    "scenario",
    "wait_for",
]


#: How long a scenario waits for a thread or a late result before calling it a failure.
WAIT_SECONDS = 30.0


def wait_for(condition: Callable[[], bool], timeout: float = WAIT_SECONDS) -> bool:
    """Poll ``condition`` until it holds; False after ``timeout`` seconds.

    For outcomes recorded by a thread the scenario cannot join (a handler that
    passed its deadline records its late result itself).
    """
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


class ScenarioError(Exception):
    """A scenario cannot run as asked (unknown name, a ledger that already holds its operation)."""


@dataclass(frozen=True, slots=True)
class Scenario:
    """A named, deterministic failure story with the invariant it must keep."""

    name: str
    summary: str
    invariant: str
    run: Callable[[ScenarioEnv], ScenarioReport]


#: Every scenario by name, in the order they are listed.
SCENARIOS: dict[str, Scenario] = {}


def scenario(
    name: str,
) -> Callable[[Callable[[ScenarioEnv], ScenarioReport]], Callable[[ScenarioEnv], ScenarioReport]]:
    """Register a scenario; its docstring's first line and ``Invariant:`` paragraph describe it."""

    def register(
        function: Callable[[ScenarioEnv], ScenarioReport],
    ) -> Callable[[ScenarioEnv], ScenarioReport]:
        doc = inspect.getdoc(function) or ""
        summary = doc.split("\n", 1)[0].strip()
        _, marker, rest = doc.partition("Invariant:")
        if not summary or not marker:
            msg = f"scenario {name!r} must document its summary and its invariant"
            raise ValueError(msg)
        invariant = " ".join(rest.split("\n\n", 1)[0].split())
        SCENARIOS[name] = Scenario(name, summary, invariant, function)
        return function

    return register


@dataclass
class ScenarioEnv:
    """Where a scenario runs: its ledger file, a work directory, a hand-moved clock, a seed."""

    scenario: Scenario
    seed: int
    ledger_path: Path
    workdir: Path
    clock: ManualClock = field(default_factory=ManualClock)
    _ledgers: list[SQLiteEffectLedger] = field(default_factory=list)

    @property
    def subject(self) -> str:
        """The scenario's business identifier (an invoice id), unique per scenario and seed."""
        return f"{self.scenario.name}-{self.seed}"

    @property
    def amount_cents(self) -> int:
        """The amount the scenario charges, drawn from the seed."""
        return random.Random(self.seed).randint(100, 99_999)

    def open_ledger(self) -> SQLiteEffectLedger:
        """Open a handle on the scenario's ledger (closed when the scenario ends)."""
        ledger = SQLiteEffectLedger(self.ledger_path, clock=self.clock)
        self._ledgers.append(ledger)
        return ledger

    def executor(self, ledger: SQLiteEffectLedger) -> EffectExecutor:
        """An executor on ``ledger`` that reads the scenario's clock.

        Its waits advance that clock, and their jitter is drawn from the seed, so
        a scenario's report is the same on every run.
        """
        return EffectExecutor(ledger, clock=self.clock, jitter=seeded_jitter(self.seed))

    def payments(
        self,
        *,
        guaranteed: bool,
        lookup: Lookup,
        faults: FaultPlan,
        path: str | os.PathLike[str] | None = None,
        **contract_options: Any,
    ) -> tuple[FakePaymentProvider, EffectContract, dict[str, Any]]:
        """A payment provider, the capture contract that honestly describes it, and arguments."""
        provider = FakePaymentProvider(
            idempotency_guaranteed=guaranteed,
            lookup=lookup,
            faults=faults,
            path=path,
            late_commit_after=30.0,
        )
        contract = EffectContract(
            name="capture_payment",
            operation_id=lambda arguments: f"invoice:{arguments['invoice_id']}:capture",
            provider_idempotency_key=lambda arguments: f"capture:{arguments['invoice_id']}",
            provider_idempotency_guaranteed=guaranteed,
            outcome_probe=None if lookup is Lookup.NONE else provider.probe,
            **contract_options,
        )
        arguments = {"invoice_id": self.subject, "amount_cents": self.amount_cents}
        return provider, contract, arguments

    def require_fresh(self, ledger: SQLiteEffectLedger, operation_id: str) -> None:
        """Refuse to run over an operation the ledger already holds (a reused ``--db``)."""
        if ledger.get(operation_id) is not None:
            msg = (
                f"the ledger {self.ledger_path} already holds operation {operation_id!r}; "
                "use a fresh ledger or another seed"
            )
            raise ScenarioError(msg)

    def report(
        self,
        *,
        ledger: SQLiteEffectLedger,
        provider: FakeProvider,
        operation_id: str,
        checks: Sequence[tuple[str, bool]],
        details: Mapping[str, Any] | None = None,
    ) -> ScenarioReport:
        """Build the report from the ledger's record, the provider's count and ``checks``.

        Every report also checks that the provider committed at most one effect
        and that the ledger's event chains verify.
        """
        record = ledger.get(operation_id)
        events = ledger.events(operation_id)
        committed = provider.committed()
        all_checks = [
            *checks,
            ("the provider committed at most one effect", committed <= 1),
            ("the ledger's event chains verify", ledger.verify().ok),
        ]
        return ScenarioReport(
            scenario=self.scenario.name,
            seed=self.seed,
            operation_id=operation_id,
            final_status="ABSENT" if record is None else record.status.value,
            attempts=0 if record is None else record.attempts,
            committed_effects=committed,
            duplicates_detected=max(0, committed - 1),
            event_types=tuple(event.type.value for event in events),
            invariant=self.scenario.invariant,
            checks=tuple(Check(description, bool(held)) for description, held in all_checks),
            details=dict(details or {}),
        )

    def close(self) -> None:
        """Close every ledger handle the scenario opened."""
        for ledger in self._ledgers:
            ledger.close()
        self._ledgers.clear()


def run_scenario(
    name: str, *, seed: int = 0, db: str | os.PathLike[str] | None = None
) -> ScenarioReport:
    """Run scenario ``name`` and return its report.

    ``db`` is the SQLite ledger file to record into (default: a temporary file,
    removed afterwards). Provider state always lives in a temporary directory.
    Raises :class:`ScenarioError` for an unknown name or a ledger that already
    holds the scenario's operation, and the ledger's errors for a ``db`` that
    cannot be used; nothing is recorded in either case.
    """
    found = SCENARIOS.get(name)
    if found is None:
        msg = f"unknown scenario {name!r}; choose from: {', '.join(SCENARIOS)}"
        raise ScenarioError(msg)
    with tempfile.TemporaryDirectory(prefix="effectguard-scenario-") as tmp:
        workdir = Path(tmp)
        ledger_path = Path(db) if db is not None else workdir / "ledger.db"
        env = ScenarioEnv(found, seed, ledger_path, workdir)
        try:
            return found.run(env)
        finally:
            env.close()
