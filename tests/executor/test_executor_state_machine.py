"""Random sequences of calls, faults, stalls, lease expiries and operator actions.

A Hypothesis state machine drives the executor against fake providers of
every contract kind. An honest operator acts only on what the provider
shows. After every step: never two committed effects for one operation,
CONFIRMED only with a stored result (and an effect the provider holds), and a
QUARANTINED operation is never dispatched.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
import time
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from effectguard import EffectExecutor, EffectStatus, SQLiteEffectLedger
from effectguard.errors import IllegalTransitionError, OperationNotFoundError
from effectguard.testkit import Fault, FaultPlan, ManualClock
from effectguard.testkit._crash.kinds import ContractKind, Service, Setup, build_setup

LEASE_SECONDS = 30.0
WAIT = 30.0
OPERATIONS = 2
OPERATION = st.integers(min_value=0, max_value=OPERATIONS - 1)
FAULTS = st.sampled_from([Fault.NONE, Fault.FAIL_BEFORE_COMMIT, Fault.LOSE_ACK, Fault.PENDING])
KINDS = st.sampled_from(list(ContractKind))
SERVICES = st.sampled_from(list(Service))
OPERATOR = {"actor": "ops@example.test", "reason": "checked", "evidence_reference": "TICKET-1"}


class ExecutorMachine(RuleBasedStateMachine):
    """The executor under random faults, stalls, clock moves and operator resolutions."""

    def __init__(self) -> None:
        super().__init__()
        self.workdir = Path(tempfile.mkdtemp(prefix="effectguard-machine-"))
        self.clock = ManualClock(1_800_000_000.0)
        # NORMAL: this test is about the state machine, not about fsync.
        self.ledger = SQLiteEffectLedger(
            self.workdir / "ledger.db", clock=self.clock, synchronous="NORMAL"
        )
        self.executor = EffectExecutor(self.ledger, clock=self.clock)
        self.setups: list[Setup] = []
        self.stalled: dict[int, threading.Thread] = {}
        self.errors: list[BaseException] = []

    @initialize(kinds=st.lists(KINDS, min_size=OPERATIONS, max_size=OPERATIONS), service=SERVICES)
    def build(self, kinds: list[ContractKind], service: Service) -> None:
        """Two operations, each with its own provider of a drawn contract kind."""
        for number, kind in enumerate(kinds):
            chosen = Service.PAYMENT if kind is ContractKind.GUARANTEED_KEY else service
            self.setups.append(
                build_setup(
                    kind,
                    chosen,
                    f"op{number}",
                    faults=FaultPlan(pending_probes=1),
                    visible_after_reads=1,
                    lease_seconds=LEASE_SECONDS,
                    late_commit_after=WAIT,
                )
            )

    # -- helpers ----------------------------------------------------------------------

    def _record(self, number: int):
        return self.ledger.get(self.setups[number].operation_id)

    def _plan_next(self, number: int, fault: Fault) -> None:
        setup = self.setups[number]
        setup.provider.faults.set(setup.provider.attempts(setup.reference) + 1, fault)

    def _execute(self, number: int):
        setup = self.setups[number]
        return self.executor.execute(setup.contract, setup.arguments, setup.handler)

    # -- rules ------------------------------------------------------------------------

    @rule(number=OPERATION, fault=FAULTS)
    def call(self, number: int, fault: Fault) -> None:
        """Execute the operation; its next request meets ``fault``."""
        provider = self.setups[number].provider
        before = self._record(number)
        requests = provider.attempts()
        self._plan_next(number, fault)
        result = self._execute(number)
        if before is not None and before.status is EffectStatus.QUARANTINED:
            assert provider.attempts() == requests, "a QUARANTINED operation was dispatched"
            assert result.status is EffectStatus.QUARANTINED
        if before is not None and before.status.terminal:
            assert result.replayed
            assert provider.attempts() == requests

    @rule(number=OPERATION)
    def stall(self, number: int) -> None:
        """Start a call whose request the provider holds (the owner stalls inside it)."""
        if number in self.stalled:
            return
        provider = self.setups[number].provider
        self._plan_next(number, Fault.LATE_COMMIT)
        held = provider.held

        def run() -> None:
            try:
                self._execute(number)
            except BaseException as exc:
                self.errors.append(exc)

        thread = threading.Thread(target=run)
        thread.start()
        deadline = time.monotonic() + WAIT
        while thread.is_alive() and provider.held == held:
            assert time.monotonic() < deadline, "the stalled call neither finished nor was held"
            thread.join(0.001)
        if provider.held > held:
            self.stalled[number] = thread
        else:
            self._plan_next(number, Fault.NONE)  # it did not dispatch: forget the planned stall

    @rule(number=OPERATION)
    def release(self, number: int) -> None:
        """Let a stalled request commit, and wait for its late result to be recorded."""
        thread = self.stalled.pop(number, None)
        if thread is None:
            return
        provider = self.setups[number].provider
        provider.release_late()
        thread.join(WAIT)
        assert not thread.is_alive()
        provider.rearm_late()

    @rule()
    def expire_leases(self) -> None:
        """Move the clock past every lease."""
        self.clock.advance(LEASE_SECONDS + 1)

    @rule(number=OPERATION)
    def operator_confirm(self, number: int) -> None:
        """An operator who sees the effect at the provider confirms it with its answer."""
        setup = self.setups[number]
        effects = setup.provider.effects()
        if not effects:
            return
        with contextlib.suppress(IllegalTransitionError, OperationNotFoundError):
            self.ledger.confirm(
                setup.operation_id,
                output=effects[0]["response"],
                provider_operation_id=None,
                **OPERATOR,
            )

    @rule(number=OPERATION, retry=st.booleans())
    def operator_reject_or_retry(self, number: int, retry: bool) -> None:
        """An operator who sees nothing at the provider and no stalled sender rejects or retries."""
        setup = self.setups[number]
        if number in self.stalled or setup.provider.accepted() > 0:
            return
        action = self.ledger.authorize_retry if retry else self.ledger.reject
        with contextlib.suppress(IllegalTransitionError, OperationNotFoundError):
            action(setup.operation_id, **OPERATOR)

    # -- invariants -------------------------------------------------------------------

    @invariant()
    def never_two_effects_for_one_operation(self) -> None:
        """Each operation's provider holds at most one committed effect."""
        for setup in self.setups:
            assert setup.provider.committed() <= 1, setup.provider.effects()

    @invariant()
    def confirmed_only_with_a_stored_result_and_a_real_effect(self) -> None:
        """CONFIRMED carries a stored output, and the provider really holds the effect."""
        for number, setup in enumerate(self.setups):
            record = self._record(number)
            if record is not None and record.status is EffectStatus.CONFIRMED:
                assert record.output_json is not None
                assert setup.provider.committed() == 1

    @invariant()
    def no_call_failed_in_a_stalled_thread(self) -> None:
        """Calls running in stalled threads end without raising."""
        assert not self.errors, self.errors

    def teardown(self) -> None:
        """Release stalled requests, check the ledger's chains, remove the files."""
        for number, thread in list(self.stalled.items()):
            self.setups[number].provider.release_late()
            thread.join(WAIT)
        try:
            assert self.ledger.verify().ok
        finally:
            self.ledger.close()
            shutil.rmtree(self.workdir, ignore_errors=True)


ExecutorMachine.TestCase.settings = settings(
    max_examples=75,
    stateful_step_count=30,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestExecutorStateMachine = ExecutorMachine.TestCase
