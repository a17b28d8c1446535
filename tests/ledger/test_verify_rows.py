"""verify covers the operation rows and every claim, not only the events (issue 14).

Each tamper edits the ledger's storage directly, behind effectguard's back;
verify() and ``agent-effect-ops verify`` must name it, and a forged output must
never be replayed (the fake provider still counts one effect).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from support import ARGS, OPERATION, capture_contract

from effectguard import EffectExecutor, EffectLedger, EffectStatus, LedgerIntegrityError
from effectguard.cli.ops import main
from effectguard.ledger import AnchorHead
from effectguard.testkit import FakePaymentProvider, ManualClock

FORGED = '{"amount_cents":1999,"id":"cap_999999","invoice_id":"INV-1042","status":"succeeded"}'
SECOND = {**ARGS, "invoice_id": "INV-2000"}
SECOND_OPERATION = "invoice:INV-2000:capture"


@pytest.fixture
def provider() -> FakePaymentProvider:
    """The fake provider whose committed count is the ground truth."""
    return FakePaymentProvider()


@pytest.fixture
def confirmed(ledger: EffectLedger, provider: FakePaymentProvider) -> EffectLedger:
    """``ledger`` holding OPERATION, CONFIRMED by one real dispatch."""
    executor = EffectExecutor(ledger, clock=ManualClock(1_800_000_000.0))
    result = executor.execute(capture_contract(provider), ARGS, provider.handler)
    assert result.status is EffectStatus.CONFIRMED
    assert ledger.verify().ok
    return ledger


def cli_verify(target: str, *args: str) -> Any:
    """Run ``agent-effect-ops verify`` against ``target``; return the click result."""
    return CliRunner().invoke(main, ["--db", target, "verify", *args])


def fields_named(ledger: EffectLedger) -> set[str]:
    """The row fields verify() reports as differing from what their events committed to."""
    return {
        problem.problem.split("'")[1]
        for problem in ledger.verify().problems
        if problem.problem.startswith("operation field")
    }


def test_a_forged_output_is_reported_and_never_replayed(
    confirmed: EffectLedger,
    provider: FakePaymentProvider,
    ledger_sql: Callable[..., None],
    ledger_target: str,
) -> None:
    """An edited CONFIRMED output fails verify, and a replay raises instead of returning it."""
    ledger_sql("UPDATE operations SET output = ? WHERE operation_id = ?", FORGED, OPERATION)
    assert fields_named(confirmed) == {"output"}
    assert cli_verify(ledger_target).exit_code == 1
    fresh = EffectExecutor(confirmed, clock=ManualClock(1_800_000_100.0))
    with pytest.raises(LedgerIntegrityError, match="agent-effect-ops verify") as caught:
        fresh.execute(capture_contract(provider), ARGS, provider.handler)
    assert OPERATION in str(caught.value)
    assert provider.committed() == 1
    assert provider.requests == 1


@pytest.mark.parametrize(
    ("assignments", "fields"),
    [
        (
            'arguments = \'{"amount_cents":1,"invoice_id":"INV-1042"}\', fingerprint = \'f\'',
            {"arguments", "fingerprint"},
        ),
        ("attempts = 0, attempt_budget = 9", {"attempts", "attempt_budget"}),
        ("provider_key = 'capture:INV-other'", {"provider_key"}),
        ("provider_operation_id = 'cap_999999'", {"provider_operation_id"}),
        ("lease_token = 'stolen'", {"lease"}),
    ],
)
def test_an_edited_row_field_is_named_by_verify(
    confirmed: EffectLedger,
    ledger_sql: Callable[..., None],
    ledger_target: str,
    assignments: str,
    fields: set[str],
) -> None:
    """Editing a committed row field makes verify name the operation and that field."""
    ledger_sql(f"UPDATE operations SET {assignments} WHERE operation_id = ?", OPERATION)  # noqa: S608 - the test's own constant SQL
    assert fields_named(confirmed) == fields
    assert {p.operation_id for p in confirmed.verify().problems} == {OPERATION}
    result = cli_verify(ledger_target)
    assert result.exit_code == 1
    assert OPERATION in result.stdout


def delete_operation(ledger_sql: Callable[..., None], operation_id: str) -> None:
    """Delete an operation's row and every event of it, as a careless cleanup would."""
    ledger_sql("DELETE FROM events WHERE operation_id = ?", operation_id)
    ledger_sql("DELETE FROM operations WHERE operation_id = ?", operation_id)


def test_a_deleted_operation_is_reported_as_claimed_but_gone(
    confirmed: EffectLedger, ledger_sql: Callable[..., None], ledger_target: str
) -> None:
    """Deleting an operation with all its events leaves its claim in the anchor: verify says so."""
    delete_operation(ledger_sql, OPERATION)
    problems = confirmed.verify().problems
    assert [(p.operation_id, "row is gone" in p.problem) for p in problems] == [(OPERATION, True)]
    assert cli_verify(ledger_target).exit_code == 1


def test_an_exported_anchor_catches_a_deletion_that_rewound_the_anchor(
    confirmed: EffectLedger,
    provider: FakePaymentProvider,
    ledger_sql: Callable[..., None],
    ledger_target: str,
    backend: str,
    tmp_path: Path,
) -> None:
    """Deleting the last claim too passes plain verify, but not against the exported head."""
    executor = EffectExecutor(confirmed, clock=ManualClock(1_800_000_200.0))
    executor.execute(capture_contract(provider), SECOND, provider.handler)
    head_file = tmp_path / "anchor.json"
    assert cli_verify(ledger_target, "--export-anchor", str(head_file)).exit_code == 0
    exported = AnchorHead.loads(head_file.read_text())
    assert exported.count == 2

    delete_operation(ledger_sql, SECOND_OPERATION)
    if backend == "postgres":  # the head row of the anchor shard the claim went to
        ledger_sql(
            "UPDATE claims_head AS h SET count = h.count - 1, running = coalesce((SELECT"
            " c.running FROM claims AS c WHERE c.shard = h.shard AND c.seq = h.count - 1), '')"
            " WHERE h.shard = (SELECT shard FROM claims WHERE operation_id = ?)",
            SECOND_OPERATION,
        )
    ledger_sql("DELETE FROM claims WHERE operation_id = ?", SECOND_OPERATION)
    assert confirmed.verify().ok  # consistent without an outside reference: the known limit
    report = confirmed.verify(anchor=exported)
    assert not report.ok
    assert "rewound" in report.problems[0].problem
    result = cli_verify(ledger_target, "--anchor", str(head_file))
    assert result.exit_code == 1
    assert "rewound" in result.stderr


def test_an_edited_anchor_breaks_its_running_hash(
    confirmed: EffectLedger, ledger_sql: Callable[..., None]
) -> None:
    """Rewriting a claim's running hash in the anchor is reported."""
    ledger_sql("UPDATE claims SET running = ? WHERE operation_id = ?", b"x" * 32, OPERATION)
    problems = {p.problem.split(" (")[0] for p in confirmed.verify().problems}
    assert "anchor running hash breaks at claim 1" in problems


def test_an_output_forged_after_a_good_replay_is_still_refused(
    confirmed: EffectLedger, provider: FakePaymentProvider, ledger_sql: Callable[..., None]
) -> None:
    """A replay already checked does not vouch for the output once it is edited."""
    executor = EffectExecutor(confirmed, clock=ManualClock(1_800_000_100.0))
    replayed = executor.execute(capture_contract(provider), ARGS, provider.handler)
    assert replayed.replayed
    assert replayed.output["id"] == "cap_000001"
    ledger_sql("UPDATE operations SET output = ? WHERE operation_id = ?", FORGED, OPERATION)
    fresh = EffectExecutor(confirmed, clock=ManualClock(1_800_000_200.0))
    with pytest.raises(LedgerIntegrityError, match=OPERATION):
        fresh.execute(capture_contract(provider), ARGS, provider.handler)
    assert provider.committed() == 1
    assert provider.requests == 1
