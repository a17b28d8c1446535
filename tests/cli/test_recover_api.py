"""``effectguard.recover()``, the Recoverer's backoff, and ``configure(recover_on_start=True)``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from recovery_support import OP, Site, leave_uncertain, make_site

import effectguard
from effectguard import (
    INJECTED,
    EffectLedger,
    EffectStatus,
    EventType,
    OutcomeProbeResult,
    ProbeStatus,
    effect,
)
from effectguard.operator import Recoverer
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan


@pytest.fixture
def site(tmp_path: Path, ledger_target: str) -> Site:
    """The tools module and provider state in this test's directory, over its ledger."""
    return make_site(tmp_path, ledger_target)


def test_recover_confirms_what_the_provider_holds_and_sends_nothing(
    site: Site, ledger: EffectLedger
) -> None:
    """recover() with the tools' module: the committed capture is CONFIRMED, one capture in all."""
    leave_uncertain(site, ledger)
    report = effectguard.recover(ledger, tools=[site.module()])

    assert [(o.operation_id, o.after) for o in report.changed] == [(OP, EffectStatus.CONFIRMED)]
    assert ledger.get(OP).status is EffectStatus.CONFIRMED
    assert site.provider.committed() == 1
    assert report.to_json()["changed"] == 1


def test_recover_dry_run_writes_nothing(site: Site, ledger: EffectLedger) -> None:
    """A dry run reports the change and leaves the record as it was."""
    leave_uncertain(site, ledger)
    before = ledger.get(OP)

    report = effectguard.recover(ledger, tools=[site.module()], dry_run=True)

    assert report.dry_run
    assert [o.after for o in report.changed] == [EffectStatus.CONFIRMED]
    assert not report.changed[0].written
    assert ledger.get(OP) == before


def test_recover_without_the_tool_reports_it_skipped(site: Site, ledger: EffectLedger) -> None:
    """An operation whose tool is not given is skipped with the reason, not guessed at."""
    leave_uncertain(site, ledger)
    report = effectguard.recover(ledger, tools=effectguard.operator.ToolIndex())

    assert report.probed == ()
    assert [item.operation_id for item in report.skipped] == [OP]
    assert "--tools" in report.skipped[0].reason
    assert ledger.get(OP).status is EffectStatus.QUARANTINED


def test_recoverer_backs_off_per_operation_between_sweeps(site: Site, ledger: EffectLedger) -> None:
    """An operation left as it was is deferred, then probed again once its backoff runs out."""
    leave_uncertain(site, ledger, committed=False)
    now = [100.0]
    recoverer = Recoverer(
        ledger,
        effectguard.operator.load_tools([site.module()]),
        backoff_initial=10,
        clock=lambda: now[0],
    )

    first = recoverer.sweep()
    second = recoverer.sweep()
    now[0] += 11
    third = recoverer.sweep()
    fourth = recoverer.sweep()
    now[0] += 11  # the backoff doubled to 20 s
    fifth = recoverer.sweep()

    assert [o.probe for o in first.probed] == [ProbeStatus.NOT_COMMITTED]
    assert (len(second.probed), second.deferred) == (0, 1)
    assert (len(third.probed), third.deferred) == (1, 0)
    assert (len(fourth.probed), len(fifth.probed), fifth.deferred) == (0, 0, 1)
    reprobed = [e for e in ledger.events(OP) if e.type is EventType.REPROBED]
    assert len(reprobed) == 2
    assert site.provider.committed() == 0  # a send would have committed: none was made


def test_configure_recover_on_start_sweeps_in_the_background(
    site: Site, ledger_target: str, ledger: EffectLedger
) -> None:
    """The start-up sweep runs in a thread, finds the probes among this process's tools."""
    leave_uncertain(site, ledger)
    site.module()  # the service's tools are imported, as they would be at start-up

    configuration = effectguard.configure(ledger_target, recover_on_start=True)
    try:
        assert configuration.recovery is not None
        configuration.recovery.join(60)
        assert not configuration.recovery.is_alive()
    finally:
        configuration.restore()

    assert ledger.get(OP).status is EffectStatus.CONFIRMED
    assert site.provider.committed() == 1


def test_recover_refuses_a_status_it_does_not_sweep(ledger: EffectLedger) -> None:
    """Asking a sweep for settled operations is a configuration error naming the choices."""
    with pytest.raises(effectguard.ConfigurationError, match="not CONFIRMED"):
        effectguard.recover(ledger, tools=[], statuses=[EffectStatus.CONFIRMED])


def test_an_operation_backing_off_never_hides_the_ones_behind_it(
    site: Site, ledger: EffectLedger
) -> None:
    """With --limit 1, the next sweep probes the next operation, not nothing."""
    first = leave_uncertain(site, ledger, committed=False, invoice="INV-1")
    second = leave_uncertain(site, ledger, committed=False, invoice="INV-2")
    recoverer = Recoverer(
        ledger, effectguard.operator.load_tools([site.module()]), limit=1, clock=lambda: 100.0
    )

    one = recoverer.sweep()
    two = recoverer.sweep()

    probed = [o.operation_id for o in one.probed] + [o.operation_id for o in two.probed]
    assert sorted(probed) == sorted([first, second])
    assert two.deferred == 1
    assert site.provider.committed() == 0


class _Billing:
    """Tools as methods of an object whose probe is a method too (the README's shape)."""

    def __init__(self, provider: FakePaymentProvider) -> None:
        self.provider = provider
        self.down = True

    def find_capture(
        self, invoice_id: str, amount_cents: int, *, idempotency_key: str
    ) -> OutcomeProbeResult:
        """Ask the provider for the capture sent with this key (down until told otherwise)."""
        del amount_cents
        if self.down:
            msg = "the lookup API is down"
            raise ConnectionError(msg)
        return self.provider.probe({"invoice_id": invoice_id}, idempotency_key=idempotency_key)

    @effect(
        name="billing.method_capture",
        operation_id="invoice:{invoice_id}:method-capture",
        idempotency_key="mcapture:{invoice_id}",
        probe=find_capture,
    )
    def capture(
        self, invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED
    ) -> dict[str, Any]:
        """Capture a payment."""
        return self.provider.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)


def test_recover_binds_a_method_probe_to_the_object_the_tools_were_found_on(
    ledger: EffectLedger,
) -> None:
    """Tools given as an object: their probe is called on it, as a call would, and confirms."""
    billing = _Billing(
        FakePaymentProvider(idempotency_guaranteed=False, faults=FaultPlan([Fault.LOSE_ACK]))
    )
    with effectguard.use_executor(effectguard.EffectExecutor(ledger, deadline=0)):
        first = billing.capture.execute("INV-3", 300)
    assert first.status is EffectStatus.QUARANTINED
    billing.down = False

    report = effectguard.recover(ledger, tools=[billing])

    assert [o.after for o in report.changed] == [EffectStatus.CONFIRMED]
    assert billing.provider.committed() == 1
    assert billing.provider.requests == 1
