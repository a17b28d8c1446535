"""The Temporal adapter under ``temporalio.testing.ActivityEnvironment``, retries driven here.

No Temporal server runs here (the SDK's test servers download a binary at
run time), so each test plays the server's part: it runs attempt 1, 2, …
of an activity with the ``Info`` a server would send (a rising ``attempt``,
the same workflow and activity ids), stops where a non-retryable error
would stop the server, and counts the effects at the fake provider.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import dataclasses
import functools
import inspect
import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from extras_support import import_extra

temporalio = import_extra("temporalio", "temporal")

from fault_children import confirm  # noqa: E402 - after the extra's check
from temporal_shop import Shop, attempt, drive  # noqa: E402 - ditto
from temporalio import activity  # noqa: E402 - ditto
from temporalio.api.failure.v1 import Failure  # noqa: E402 - ditto
from temporalio.converter import DataConverter  # noqa: E402 - ditto
from temporalio.exceptions import ApplicationError  # noqa: E402 - ditto
from temporalio.testing import ActivityEnvironment  # noqa: E402 - ditto
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput  # noqa: E402 - ditto

from effectguard import (  # noqa: E402 - ditto
    CallScope,
    ConfigurationError,
    EffectRejected,
    EffectStatus,
    call_scoped,
    effect,
    open_ledger,
)
from effectguard.adapters import PendingEffect  # noqa: E402 - ditto
from effectguard.adapters.temporal import (  # noqa: E402 - ditto
    NON_RETRYABLE_TYPES,
    RETRYABLE_TYPES,
    EffectInterceptor,
    activity_scope,
    effect_activity,
)
from effectguard.testkit import Fault, FaultPlan, Lookup  # noqa: E402 - ditto

CHILD = Path(__file__).with_name("temporal_child.py")
SCOPED_OP = "capture:temporal:default:order-42:1"


@pytest.fixture
def make_shop(ledger_target, tmp_path):
    shops: list[Shop] = []

    def make(**options: Any) -> Shop:
        shop = Shop(ledger_target, tmp_path, **options)
        shops.append(shop)
        return shop

    yield make
    for shop in shops:
        shop.close()


def _status(ledger_target: str, operation_id: str) -> EffectStatus:
    ledger = open_ledger(ledger_target)
    try:
        record = ledger.get(operation_id)
        assert record is not None, f"{operation_id} is not in the ledger"
        return record.status
    finally:
        ledger.close()


# -- identity ---------------------------------------------------------------------------


@activity.defn
@effect_activity
def where_am_i() -> list[str]:
    scope = CallScope.current()
    assert scope is not None
    return [scope.run_id, scope.call_id]


def test_the_scope_is_namespace_workflow_and_activity_id_never_run_id_or_attempt():
    """Every attempt of one activity, in any run of its workflow, has one call scope."""
    scopes = {
        tuple(attempt(where_am_i, number=number, run_id=run_id))
        for number, run_id in [(1, "run-1"), (2, "run-1"), (7, "run-2")]
    }
    assert scopes == {("temporal:default:order-42", "1")}
    assert attempt(where_am_i, activity_id="2") == ["temporal:default:order-42", "2"]
    assert attempt(where_am_i, workflow_id="order-43") == ["temporal:default:order-43", "1"]
    assert CallScope.current() is None


def test_an_activity_started_without_a_workflow_is_scoped_by_its_activity_id():
    """A standalone activity (no workflow id) scopes by namespace and activity id."""
    info = ActivityEnvironment().info
    standalone = dataclasses.replace(info, workflow_id=None, activity_id="act-9")
    assert activity_scope(standalone) == ("temporal:default:activity", "act-9")


def test_called_outside_an_activity_it_refuses_before_anything_is_recorded(make_shop):
    """Without an activity context there is no identity: ConfigurationError, nothing sent."""
    shop = make_shop()
    with pytest.raises(ConfigurationError, match="outside one; nothing was recorded or sent"):
        shop.charge("INV-1", 1200)
    assert shop.payments.requests == 0
    assert shop.executor.ledger.list_operations() == []


# -- the failures a retried activity meets ----------------------------------------------


def test_a_lost_ack_is_retried_and_attempt_two_does_not_resend(make_shop, ledger_target):
    """Lost ack on attempt 1: a retryable error with a delay; attempt 2 confirms; one effect."""
    shop = make_shop(
        faults=FaultPlan({1: Fault.LOSE_ACK}), lookup=Lookup.EVENTUAL, visible_after_reads=1
    )
    retries = drive(shop.charge, "INV-1", 1200)
    assert retries.attempts == ["EffectOutcomeUnknown", "ok"]
    assert retries.output["invoice_id"] == "INV-1"
    assert len(retries.delays) == 1
    assert 0.5 <= retries.delays[0] <= 1.0
    assert shop.payments.committed() == 1
    assert shop.payments.requests == 1  # attempt 2 reconciled by probe; it sent nothing
    assert _status(ledger_target, SCOPED_OP) is EffectStatus.CONFIRMED


def test_without_effectguard_the_same_retries_charge_twice(tmp_path):
    """The control: an unguarded activity retried after the same lost ack commits twice."""
    shop = Shop(str(tmp_path / "ledger.db"), tmp_path, faults=FaultPlan({1: Fault.LOSE_ACK}))

    @activity.defn(name="charge")
    def charge(invoice_id: str, amount_cents: int) -> dict[str, Any]:
        try:
            return shop.payments.capture(invoice_id, amount_cents)
        except Exception as exc:
            raise ApplicationError(str(exc), type=type(exc).__name__) from exc

    try:
        retries = drive(charge, "INV-1", 1200)
        assert retries.attempts == ["ProviderTimeout", "ok"]
        assert shop.payments.committed() == 2
    finally:
        shop.close()


def test_quarantine_is_non_retryable_and_an_operator_confirm_lets_the_next_attempt_return(
    make_shop, ledger_target
):
    """Quarantined: non-retryable, naming the op and the command; after confirm, the output."""
    shop = make_shop(faults=FaultPlan({1: Fault.LOSE_ACK}))
    operation = "capture-unprobed:temporal:default:order-42:1"
    retries = drive(shop.charge_unprobed, "INV-2", 900)
    error = retries.error
    assert error is not None
    assert retries.attempts == ["EffectQuarantined"]
    assert error.non_retryable
    assert error.type in NON_RETRYABLE_TYPES
    assert operation in error.message
    assert "agent-effect-ops --db" in error.message
    assert " confirm " in error.message
    assert " authorize-retry " in error.message
    pending = PendingEffect.from_json(error.details[0])
    assert (pending.operation_id, pending.status) == (operation, EffectStatus.QUARANTINED)
    assert shop.payments.committed() == 1

    # The workflow runs the activity again (same activity id) before anyone acted: refused,
    # nothing sent.
    with pytest.raises(ApplicationError) as again:
        attempt(shop.charge_unprobed, "INV-2", 900, number=2)
    assert again.value.non_retryable
    assert shop.payments.requests == 1

    captured = shop.payments.effects()[0]["response"]
    if ledger_target.startswith("postgresql://"):
        shop.executor.ledger.confirm(
            operation,
            output=captured,
            provider_operation_id=captured["id"],
            actor="oncall",
            reason="found the capture at the provider",
            evidence_reference="T-35",
        )
    else:
        confirm(ledger_target, operation, captured)  # the operator's CLI, as a person runs it
    output = attempt(shop.charge_unprobed, "INV-2", 900, number=3)
    assert output == captured
    assert shop.payments.committed() == 1
    assert shop.payments.requests == 1


def test_a_rejected_operation_is_non_retryable_and_never_sent_again(make_shop):
    """A handler's EffectRejected: non-retryable, naming the op; a retry replays the rejection."""
    shop = make_shop()
    sends: list[str] = []

    @effect(operation_id=call_scoped("refund"), executor=shop.executor, name="shop.refund")
    def refund(invoice_id: str) -> None:
        sends.append(invoice_id)
        msg = "card closed"
        raise EffectRejected(msg)

    @activity.defn(name="refund")
    @effect_activity
    def refund_activity(invoice_id: str) -> None:
        refund(invoice_id=invoice_id)

    retries = drive(refund_activity, "INV-3")
    assert retries.attempts == ["EffectRejected"]
    assert retries.error is not None
    assert retries.error.non_retryable
    assert "refund:temporal:default:order-42:1" in retries.error.message
    assert "card closed" in retries.error.message
    assert "agent-effect-ops" in retries.error.message
    with pytest.raises(ApplicationError, match="rejected"):
        attempt(refund_activity, "INV-3", number=2)
    assert sends == ["INV-3"]


def test_a_changed_request_under_one_activity_id_is_a_non_retryable_conflict(make_shop):
    """Same workflow and activity id, other arguments: OperationConflictError, nothing sent."""
    shop = make_shop()
    attempt(shop.charge, "INV-4", 1000)
    with pytest.raises(ApplicationError) as conflict:
        attempt(shop.charge, "INV-4", 2500, run_id="run-2")
    assert conflict.value.type == "OperationConflictError"
    assert conflict.value.non_retryable
    assert SCOPED_OP in conflict.value.message
    assert "amount_cents" in conflict.value.message
    assert shop.payments.committed() == 1


def test_a_new_run_of_the_workflow_is_the_same_operation(make_shop, ledger_target):
    """Another run id, same workflow and activity id: the stored output is replayed, 1 effect."""
    shop = make_shop()
    first = attempt(shop.charge, "INV-5", 1500, run_id="run-1")
    again = attempt(shop.charge, "INV-5", 1500, run_id="run-2", number=1)
    assert again == first
    assert shop.payments.committed() == 1
    # A different workflow is a different operation, even with the same arguments.
    attempt(shop.charge, "INV-5", 1500, workflow_id="order-99")
    assert shop.payments.committed() == 2


def test_an_attempt_retried_while_the_first_still_runs_waits_and_replays(make_shop):
    """Attempt 2 while attempt 1 holds the lease: retryable EffectInProgress; then one effect."""
    shop = make_shop(faults=FaultPlan({1: Fault.LATE_COMMIT}))
    first: dict[str, Any] = {}

    def run_first() -> None:
        first["output"] = attempt(shop.charge, "INV-6", 700, number=1)

    # As after a start-to-close or heartbeat timeout: the server has given up on attempt 1,
    # whose worker is still inside the provider call, and schedules attempt 2.
    thread = threading.Thread(target=run_first)
    thread.start()
    try:
        assert shop.payments.wait_until_held(1)
        with pytest.raises(ApplicationError) as held:
            attempt(shop.charge, "INV-6", 700, number=2)
        assert held.value.type == "EffectInProgress"
        assert held.value.type in RETRYABLE_TYPES
        assert not held.value.non_retryable
        assert held.value.next_retry_delay is not None
        assert held.value.next_retry_delay.total_seconds() >= 1.0
    finally:
        shop.payments.release_late()
        thread.join(30)
    assert attempt(shop.charge, "INV-6", 700, number=3) == first["output"]
    assert shop.payments.committed() == 1


def test_the_retry_delay_doubles_with_the_attempt_up_to_its_maximum(make_shop):
    """next_retry_delay: between half and all of initial * 2**(attempt-1), capped at the max."""
    shop = make_shop(faults=FaultPlan({1: Fault.PENDING}, pending_probes=100))
    delays = []
    for number in (1, 2, 3, 12):
        with pytest.raises(ApplicationError) as unknown:
            attempt(shop.charge, "INV-8", 300, number=number)
        assert unknown.value.type == "EffectOutcomeUnknown"
        assert unknown.value.next_retry_delay is not None
        delays.append(unknown.value.next_retry_delay.total_seconds())
    for seconds, ceiling in zip(delays, (1, 2, 4, 300), strict=True):
        assert ceiling / 2 <= seconds <= ceiling
    assert shop.payments.accepted() == 1  # still pending at the provider, and sent once
    assert shop.payments.requests == 1


def test_what_the_worker_sends_the_server_keeps_the_flags_and_the_payload(make_shop):
    """The SDK's failure converter (what a worker sends) keeps type, non_retryable, the delay."""
    shop = make_shop(faults=FaultPlan({1: Fault.PENDING}, pending_probes=9))
    with pytest.raises(ApplicationError) as quarantined:
        attempt(shop.charge_unprobed, "INV-13", 100)
    with pytest.raises(ApplicationError) as unknown:
        attempt(shop.charge, "INV-13", 100, activity_id="2")

    async def round_trip(error: ApplicationError) -> tuple[Any, Any]:
        converter = DataConverter.default
        failure = Failure()
        await converter.encode_failure(error, failure)
        return failure.application_failure_info, await converter.decode_failure(failure)

    sent, received = asyncio.run(round_trip(quarantined.value))
    assert (sent.type, sent.non_retryable) == ("EffectQuarantined", True)
    assert isinstance(received, ApplicationError)
    assert received.non_retryable
    pending = PendingEffect.from_json(received.details[0])
    assert pending.operation_id == "capture-unprobed:temporal:default:order-42:1"
    assert pending.status is EffectStatus.QUARANTINED
    assert "agent-effect-ops" in received.message

    sent, received = asyncio.run(round_trip(unknown.value))
    assert (sent.type, sent.non_retryable) == ("EffectOutcomeUnknown", False)
    assert sent.HasField("next_retry_delay")
    assert received.next_retry_delay == unknown.value.next_retry_delay
    assert shop.payments.requests == 2


# -- heartbeats --------------------------------------------------------------------------


def _heartbeating_env(beats: list[tuple[Any, ...]]) -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, workflow_id="order-42", activity_id="1")
    env.on_heartbeat = lambda *details: beats.append(details)
    return env


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_heartbeat_beats_while_the_provider_call_runs_and_stops_after(make_shop, kind):
    """heartbeat=: detail-less heartbeats while the call is held, none once the activity ended."""
    shop = make_shop(faults=FaultPlan({1: Fault.LATE_COMMIT}))
    every = timedelta(milliseconds=20)

    @effect_activity(heartbeat=every)
    def charge_sync(invoice_id: str, amount_cents: int) -> Any:
        return shop.capture(invoice_id=invoice_id, amount_cents=amount_cents)

    @effect_activity(heartbeat=every)
    async def charge_async(invoice_id: str, amount_cents: int) -> Any:
        return await asyncio.to_thread(
            shop.capture, invoice_id=invoice_id, amount_cents=amount_cents
        )

    beats: list[tuple[Any, ...]] = []
    env = _heartbeating_env(beats)
    done: dict[str, Any] = {}

    def run() -> None:
        if kind == "sync":
            done["output"] = env.run(charge_sync, "INV-14", 100)
        else:
            done["output"] = asyncio.run(env.run(charge_async, "INV-14", 100))

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert shop.payments.wait_until_held(1)
        time.sleep(0.3)
    finally:
        shop.payments.release_late()
        thread.join(30)
    assert done["output"]["invoice_id"] == "INV-14"
    assert len(beats) >= 5
    assert set(beats) == {()}
    after = len(beats)
    time.sleep(0.1)
    assert len(beats) == after
    assert shop.payments.committed() == 1


def test_without_heartbeat_the_adapter_never_beats(make_shop):
    """Off by default: an activity that heartbeats itself keeps its own details."""
    shop = make_shop()
    beats: list[tuple[Any, ...]] = []
    env = _heartbeating_env(beats)
    env.run(shop.charge, "INV-15", 100)
    assert beats == []


def test_a_heartbeat_that_is_not_an_interval_is_refused():
    """heartbeat=0 is a ConfigurationError when the activity is decorated."""
    with pytest.raises(ConfigurationError, match="heartbeat"):
        effect_activity(heartbeat=timedelta(0))
    with pytest.raises(ConfigurationError, match="heartbeat"):
        EffectInterceptor(heartbeat=timedelta(seconds=-1))


# -- a worker lost mid-activity -----------------------------------------------------------


@pytest.mark.slow
def test_a_worker_killed_after_the_provider_committed_costs_no_second_effect(
    ledger_target, tmp_path
):
    """SIGKILL in attempt 1 after the commit; a fresh process runs attempt 2: one effect."""
    marker = tmp_path / "committed"
    child = subprocess.Popen(
        [sys.executable, str(CHILD), ledger_target, str(tmp_path), "1", "run-1", "kill"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert child.poll() is None, child.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the first attempt never reached the provider"
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        _, stderr = child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL, stderr[-3000:]
    assert _status(ledger_target, "capture:temporal:default:order-42:1") is EffectStatus.DISPATCHED

    # Temporal's retry of the lost attempt: the same workflow run, the next attempt, a new worker.
    done = subprocess.run(
        [sys.executable, str(CHILD), ledger_target, str(tmp_path), "2", "run-1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    reported = json.loads(done.stdout.strip().splitlines()[-1])
    shop = Shop(ledger_target, tmp_path)
    try:
        assert shop.payments.committed() == 1
        assert reported["output"] == shop.payments.effects()[0]["response"]
    finally:
        shop.close()
    assert _status(ledger_target, "capture:temporal:default:order-42:1") is EffectStatus.CONFIRMED


def _child(ledger_target: str, directory: Path, number: int, *hold: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(CHILD), ledger_target, str(directory), str(number), "run-1", *hold],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _reported(child: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err[-3000:]
    return dict(json.loads(out.strip().splitlines()[-1]))


@pytest.mark.slow
def test_two_workers_on_one_activity_one_still_inside_the_call_send_once(ledger_target, tmp_path):
    """Attempt 2 in another process while attempt 1 is still inside the call: one effect."""
    # As after a heartbeat or start-to-close timeout whose worker was only slow.
    first = _child(ledger_target, tmp_path, 1, "gate")
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "committed").exists():
            assert first.poll() is None, first.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the first attempt never reached the provider"
            time.sleep(0.05)
        second = _reported(_child(ledger_target, tmp_path, 2))
        assert second == {"error": "EffectInProgress", "non_retryable": False}
    finally:
        (tmp_path / "gate").touch()
    first_output = _reported(first)["output"]
    third = _reported(_child(ledger_target, tmp_path, 3))
    assert third["output"] == first_output
    shop = Shop(ledger_target, tmp_path)
    try:
        assert shop.payments.committed() == 1
    finally:
        shop.close()


# -- the interceptor --------------------------------------------------------------------


class RunsTheActivity(ActivityInboundInterceptor):
    """The end of a worker's chain: a sync activity on the executor, an async one awaited.

    As the SDK's own does for a thread pool, the sync function runs in a copy
    of the context (which carries the activity's). ``scopes_seen`` records the
    call scope in this coroutine, before the function runs.
    """

    def __init__(self) -> None:  # the chain's last link has no next
        self.scopes_seen: list[CallScope | None] = []
        self.functions: list[Any] = []

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:  # noqa: A002 - the SDK's name
        """Run ``input.fn`` with ``input.args``, as the worker's own last link does."""
        self.scopes_seen.append(CallScope.current())
        self.functions.append(input.fn)
        if inspect.iscoroutinefunction(input.fn):
            return await input.fn(*input.args)
        loop = asyncio.get_running_loop()
        call = functools.partial(contextvars.copy_context().run, input.fn, *input.args)
        return await loop.run_in_executor(input.executor, call)


def _through_interceptor(fn: Any, *args: Any, number: int = 1) -> tuple[Any, RunsTheActivity]:
    end = RunsTheActivity()
    inbound = EffectInterceptor().intercept_activity(end)
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info, attempt=number, workflow_id="order-42", activity_id="1"
    )
    with concurrent.futures.ThreadPoolExecutor(1) as pool:

        async def execute() -> Any:
            return await inbound.execute_activity(
                ExecuteActivityInput(fn=fn, args=list(args), executor=pool, headers={})
            )

        try:
            return asyncio.run(env.run(execute)), end
        except ApplicationError as exc:
            exc.add_note(f"scopes seen by the chain's end: {end.scopes_seen}")
            raise


def test_the_interceptor_scopes_a_sync_activity_in_the_thread_that_runs_it(make_shop):
    """The scope is set inside the function, on the executor's thread, not around the chain."""
    shop = make_shop()

    @activity.defn(name="charge")
    def charge(invoice_id: str, amount_cents: int) -> list[Any]:
        scope = CallScope.current()
        assert scope is not None
        output = shop.capture(invoice_id=invoice_id, amount_cents=amount_cents)
        return [scope.run_id, scope.call_id, threading.current_thread().name, output]

    (run_id, call_id, thread, output), end = _through_interceptor(charge, "INV-9", 100)
    assert (run_id, call_id) == ("temporal:default:order-42", "1")
    assert thread != threading.current_thread().name
    assert end.scopes_seen == [None]
    assert isinstance(end.functions[0], functools.partial)  # picklable for a process pool
    assert output["invoice_id"] == "INV-9"
    again, _ = _through_interceptor(charge, "INV-9", 100, number=2)
    assert again[3] == output
    assert shop.payments.committed() == 1


def test_the_interceptor_scopes_an_async_activity_and_maps_its_outcome(make_shop):
    """An async activity is awaited under its scope; a quarantine becomes non-retryable."""
    shop = make_shop(faults=FaultPlan({1: Fault.LOSE_ACK}))

    @activity.defn(name="charge_unprobed")
    async def charge(invoice_id: str, amount_cents: int) -> Any:
        return await asyncio.to_thread(
            shop.capture_unprobed, invoice_id=invoice_id, amount_cents=amount_cents
        )

    with pytest.raises(ApplicationError) as quarantined:
        _through_interceptor(charge, "INV-10", 100)
    assert quarantined.value.type == "EffectQuarantined"
    assert quarantined.value.non_retryable
    assert "capture-unprobed:temporal:default:order-42:1" in quarantined.value.message
    assert shop.payments.committed() == 1


def test_the_interceptor_leaves_a_decorated_activity_as_it_is(make_shop):
    """An effect_activity function is not wrapped a second time."""
    shop = make_shop()
    output, end = _through_interceptor(shop.charge, "INV-11", 100)
    assert end.functions == [shop.charge]
    assert output["invoice_id"] == "INV-11"


def test_other_errors_reach_temporal_unchanged(make_shop):
    """An error that is not an effect's outcome is raised as it is: the retry policy decides."""
    shop = make_shop()

    @activity.defn(name="broken")
    @effect_activity
    def broken() -> None:
        shop.executor.ledger.close()
        shop.capture(invoice_id="INV-12", amount_cents=1)

    with pytest.raises(Exception) as raised:
        attempt(broken)
    assert not isinstance(raised.value, ApplicationError)
    assert shop.payments.requests == 0
