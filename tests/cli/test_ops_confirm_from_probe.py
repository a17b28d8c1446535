"""``agent-effect-ops confirm --from-probe``: the probe's output, confirmed on the state probed.

Every test counts what the fake provider committed: asking the probe never sends.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from ops_helpers import protocol_snapshot
from recovery_support import AUDIT, OP, Site, leave_uncertain, make_site

from effectguard import EffectExecutor, EffectStatus, EventType, open_ledger, use_executor


@pytest.fixture
def site(tmp_path: Path, ledger_target: str) -> Site:
    """The tools module and provider state in this test's directory, over its ledger."""
    return make_site(tmp_path, ledger_target)


def _uncertain(site: Site, **options: object) -> str:
    ledger = open_ledger(site.target)
    try:
        return leave_uncertain(site, ledger, **options)  # type: ignore[arg-type]
    finally:
        ledger.close()


def _snapshot(site: Site) -> object:
    ledger = open_ledger(site.target)
    try:
        return protocol_snapshot(ledger)
    finally:
        ledger.close()


def _read(site: Site, operation_id: str = OP):
    ledger = open_ledger(site.target)
    try:
        return ledger.get(operation_id), ledger.events(operation_id)
    finally:
        ledger.close()


def test_confirm_from_probe_records_the_probes_output_with_the_operators_audit(
    site: Site,
) -> None:
    """The probe's output and provider id are confirmed, audited, and the next call replays them."""
    _uncertain(site)
    capture = site.provider.effects()[0]["response"]

    done = site.ops("confirm", OP, "--from-probe", "--tools", "billing_tools", *AUDIT)

    assert "the probe answers committed" in done.stdout
    assert f"confirmed {OP!r}: QUARANTINED -> CONFIRMED" in done.stdout
    record, events = _read(site)
    assert record.status is EffectStatus.CONFIRMED
    assert record.provider_operation_id == capture["id"]
    assert json.loads(record.output_json) == capture
    last = events[-1]
    assert last.type is EventType.OPERATOR_CONFIRMED
    assert (last.evidence["actor"], last.evidence["evidence_reference"]) == ("alice", "T-9")
    assert last.evidence["output_from"]["probe"] == "COMMITTED"
    module = site.module()
    ledger = open_ledger(site.target)
    try:
        with use_executor(EffectExecutor(ledger)):
            again = module.capture.execute("INV-9", 1250)
    finally:
        ledger.close()
    assert again.replayed
    assert again.output == capture
    assert site.provider.committed() == 1


def test_a_dry_run_asks_the_probe_and_writes_nothing(site: Site) -> None:
    """--dry-run shows the confirmation the probe's output would make; the ledger is unchanged."""
    _uncertain(site)
    before = _snapshot(site)

    done = site.ops("confirm", OP, "--from-probe", "--tools", "billing_tools", "--dry-run", *AUDIT)

    assert "the probe answers committed" in done.stdout
    assert "would move invoice:INV-9:capture from QUARANTINED to CONFIRMED" in done.stdout
    assert _snapshot(site) == before
    assert site.provider.committed() == 1


@pytest.mark.parametrize(
    ("committed", "probe_down", "says"),
    [
        (False, False, "answers NOT_COMMITTED, not committed: it holds no output to confirm"),
        (True, True, "answers UNKNOWN, not committed"),
    ],
)
def test_a_probe_without_the_effect_confirms_nothing(
    site: Site, committed: bool, probe_down: bool, says: str
) -> None:
    """No committed answer, no confirmation: one line naming the answer, exit 1, no write."""
    _uncertain(site, committed=committed)
    site.probe_down(probe_down)
    before = _snapshot(site)

    done = site.ops("confirm", OP, "--from-probe", "--tools", "billing_tools", *AUDIT, code=1)

    assert says in done.stderr
    assert len(done.stderr.splitlines()) == 1
    assert _snapshot(site) == before
    assert site.provider.committed() == int(committed)


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (("--output-json", "{}"), "drop --output-json"),
        (("--provider-operation-id", "ch_1"), "drop --provider-operation-id"),
        (("--output-json", "null"), "drop --output-json"),  # null is typed too
    ],
)
def test_from_probe_and_typed_output_do_not_mix(
    site: Site, extra: tuple[str, ...], says: str
) -> None:
    """One source of truth per confirmation: typed or probed, never both (exit 2)."""
    _uncertain(site)
    before = _snapshot(site)

    done = site.ops(
        "confirm", OP, "--from-probe", "--tools", "billing_tools", *extra, *AUDIT, code=2
    )

    assert says in done.stderr
    assert _snapshot(site) == before


def test_from_probe_needs_the_tools(site: Site) -> None:
    """Without --tools there is no probe to ask: exit 2 saying so."""
    _uncertain(site)
    before = _snapshot(site)

    done = site.ops("confirm", OP, "--from-probe", *AUDIT, code=2)

    assert "--from-probe needs --tools MODULE" in done.stderr
    assert _snapshot(site) == before


def test_an_expected_state_already_gone_is_refused_before_probing(site: Site) -> None:
    """--expect-events naming a state the operation has left: refused, the probe never asked."""
    _uncertain(site)
    record, _ = _read(site)
    before = _snapshot(site)
    marker = site.directory / "probed"
    (site.directory / "while-probing.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).touch()\n", encoding="utf-8"
    )

    done = site.ops(
        "confirm",
        OP,
        "--from-probe",
        "--tools",
        "billing_tools",
        "--expect-events",
        str(record.event_count - 1),
        *AUDIT,
        code=1,
    )

    assert "changed since you looked: reload" in done.stderr
    assert _snapshot(site) == before
    assert not marker.exists()  # the provider was never asked


def test_an_operation_that_moves_while_the_probe_answers_is_not_confirmed(site: Site) -> None:
    """Another operator authorizes a retry while the probe runs: the confirm loses, bob's stands."""
    _uncertain(site)
    (site.directory / "while-probing.py").write_text(
        textwrap.dedent(
            f"""
            from pathlib import Path

            from effectguard import open_ledger

            ledger = open_ledger({site.target!r})
            try:
                ledger.authorize_retry(
                    {OP!r}, actor="bob", reason="retry it", evidence_reference="T-10"
                )
            finally:
                ledger.close()
            Path(__file__).unlink()  # once
            """
        ),
        encoding="utf-8",
    )

    done = site.ops("confirm", OP, "--from-probe", "--tools", "billing_tools", *AUDIT, code=1)

    assert "changed since you looked: reload" in done.stderr
    record, events = _read(site)
    assert record.status is EffectStatus.PREPARED
    resolutions = [e for e in events if e.type.value.startswith("operator_")]
    assert [(e.type, e.evidence["actor"]) for e in resolutions] == [
        (EventType.OPERATOR_RETRY_AUTHORIZED, "bob")
    ]
    assert site.provider.committed() == 1


def test_a_typed_null_output_still_confirms(site: Site) -> None:
    """`--output-json null` is an output (a tool may return None), not a missing option."""
    _uncertain(site)

    done = site.ops(
        "confirm", OP, "--output-json", "null", "--provider-operation-id", "cap_1", *AUDIT
    )

    assert f"confirmed {OP!r}: QUARANTINED -> CONFIRMED" in done.stdout
    record, _ = _read(site)
    assert record.output_json == "null"


def test_from_probe_on_the_state_named_by_expect_events_confirms(site: Site) -> None:
    """--expect-events naming the state as it is: the probe's output is confirmed on it."""
    _uncertain(site)
    record, _ = _read(site)

    site.ops(
        "confirm",
        OP,
        "--from-probe",
        "--tools",
        "billing_tools",
        "--expect-events",
        str(record.event_count),
        "--expect-head",
        record.event_head.hex()[:16],
        *AUDIT,
    )

    after, events = _read(site)
    assert after.status is EffectStatus.CONFIRMED
    assert events[-1].seq == record.event_count + 1
    assert site.provider.committed() == 1


def test_from_probe_refuses_an_operation_that_is_no_longer_uncertain(site: Site) -> None:
    """Retry authorized (PREPARED): nothing to probe; refused in one line, nothing written."""
    _uncertain(site)
    ledger = open_ledger(site.target)
    try:
        ledger.authorize_retry(OP, actor="bob", reason="retry", evidence_reference="T-2")
    finally:
        ledger.close()
    before = _snapshot(site)

    done = site.ops("confirm", OP, "--from-probe", "--tools", "billing_tools", *AUDIT, code=1)

    assert "only uncertain operations are probed" in done.stderr
    assert _snapshot(site) == before
