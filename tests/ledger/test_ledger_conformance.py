"""The ledger contract, checked against every backend in ``BACKENDS``: writes and reads.

Verify and operator resolution are in ``test_ledger_conformance_history.py``.
"""

from __future__ import annotations

import threading
from datetime import UTC, timedelta

import pytest
from _ledger_samples import (
    DISPATCHED,
    OTHER,
    OWNER,
    TOKEN_A,
    TOKEN_B,
    TOKEN_Z,
    event,
    operation,
)

from effectguard import EffectStatus, EventType, InvalidRequestError, LedgerUnavailableError
from effectguard.errors import FencedWriteError, OperationNotFoundError
from effectguard.ledger import Changes, EventDraft, Expect, Lease
from effectguard.ledger._chain import from_micros

# -- claim ---------------------------------------------------------------------------------


def test_claim_creates_the_operation_once_and_durably(ledger, make_ledger, clock):
    """A claim creates a DISPATCHED row under its lease, visible to another handle at once."""
    record, created = ledger.claim(operation(), now=clock())
    assert created
    assert record.status is DISPATCHED
    assert (record.attempts, record.attempt_budget, record.event_count) == (1, 3, 1)
    assert (record.lease_token, record.lease_owner, record.lease_live) == (TOKEN_A, OWNER, True)
    assert record.arguments["note"] == "café ☕"
    other = make_ledger()
    assert other.get(record.operation_id, now=clock()) == record
    events = other.events(record.operation_id)
    assert [e.type for e in events] == [EventType.CLAIMED]
    assert [(e.from_status, e.to_status, e.attempt) for e in events] == [(None, DISPATCHED, 1)]
    assert [e.seq for e in events] == [1]
    assert events[-1].hash == record.event_head


def test_second_claim_returns_the_existing_record_unchanged(ledger, clock):
    """Claiming a taken operation id returns the stored record and writes nothing."""
    first, _ = ledger.claim(operation(), now=clock())
    clock.advance(5)
    again, created = ledger.claim(operation(token=TOKEN_B, fingerprint="0" * 64), now=clock())
    assert not created
    assert again.lease_token == TOKEN_A
    assert again.fingerprint == first.fingerprint
    assert again.event_head == first.event_head
    assert again.updated_at == first.updated_at
    assert len(ledger.events(first.operation_id)) == 1


def test_concurrent_claims_create_exactly_one(ledger, clock):
    """Of many threads claiming one operation id at once, exactly one creates it."""
    barrier = threading.Barrier(8)
    results: list[tuple[str | None, bool]] = []
    errors: list[BaseException] = []

    def contend(index: int) -> None:
        try:
            barrier.wait()
            record, created = ledger.claim(operation(token=f"token-{index}"), now=clock())
            results.append((record.lease_token, created))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    winners = [token for token, created in results if created]
    assert len(winners) == 1
    assert {token for token, _ in results} == set(winners)
    assert ledger.verify().ok


def test_claim_times_are_aware_utc_to_the_microsecond(ledger):
    """Record and event times are timezone-aware UTC, exact to the microsecond given."""
    now = 1_800_000_000.123456
    record, _ = ledger.claim(operation(seconds=2.5), now=now)
    moment = from_micros(1_800_000_000_123_456)
    assert record.created_at == record.updated_at == record.first_dispatched_at == moment
    assert record.created_at.utcoffset() == timedelta(0)
    assert record.lease_expires_at == moment + timedelta(seconds=2.5)
    assert all(e.at == moment for e in ledger.events(record.operation_id))


def test_claim_without_now_uses_the_ledgers_own_clock(ledger):
    """Without ``now`` the ledger's clock dates the claim and starts its lease."""
    record, _ = ledger.claim(operation(seconds=30))
    assert record.lease_live
    assert record.created_at.tzinfo is not None
    assert record.created_at.astimezone(UTC) == record.created_at
    assert record.lease_expires_at == record.created_at + timedelta(seconds=30)
    assert all(e.at == record.created_at for e in ledger.events(record.operation_id))
    assert ledger.get(record.operation_id).lease_live


def test_a_ledger_clock_replaces_its_own_when_no_now_is_given(make_ledger, clock):
    """``clock=`` dates writes and judges leases whenever a call passes no ``now``."""
    ledger = make_ledger(clock=clock)
    record, _ = ledger.claim(operation(seconds=10))
    assert record.created_at == from_micros(round(clock() * 1_000_000))
    clock.advance(11)
    assert not ledger.get(record.operation_id).lease_live


# -- transition ------------------------------------------------------------------------------


def test_transition_applies_changes_and_events_together(ledger, clock):
    """A transition sets the changed fields and appends its events in one write."""
    claimed, _ = ledger.claim(operation(), now=clock())
    clock.advance(3)
    record = ledger.transition(
        claimed.operation_id,
        Expect(statuses=frozenset({DISPATCHED}), lease_token=TOKEN_A, event_count=1),
        Changes(
            EffectStatus.CONFIRMED,
            lease=None,
            output_json='{"id":"cap_1","status":"succeeded"}',
            provider_operation_id="cap_1",
            reason="acknowledged",
            evidence={"handler": "returned"},
        ),
        [event(evidence={"handler": "returned"})],
        now=clock(),
    )
    assert record.status is EffectStatus.CONFIRMED
    assert record.output == {"id": "cap_1", "status": "succeeded"}
    assert (record.provider_operation_id, record.reason) == ("cap_1", "acknowledged")
    assert record.evidence == {"handler": "returned"}
    assert (record.lease_token, record.lease_owner, record.lease_expires_at) == (None, None, None)
    assert not record.lease_live
    assert record.updated_at == from_micros(round(clock() * 1_000_000))
    assert record.created_at == claimed.created_at
    assert record.event_count == 2
    assert ledger.get(claimed.operation_id, now=clock()) == record
    events = ledger.events(claimed.operation_id)
    assert events[-1].type is EventType.CONFIRMED
    assert (events[-1].from_status, events[-1].to_status) == (DISPATCHED, EffectStatus.CONFIRMED)
    assert events[-1].evidence == {"handler": "returned"}
    assert events[-1].hash == record.event_head
    assert ledger.verify().ok


def test_transition_keeps_the_fields_it_does_not_change(ledger, clock):
    """Fields left UNSET keep their stored values, the lease included."""
    claimed, _ = ledger.claim(operation(), now=clock())
    record = ledger.transition(
        claimed.operation_id,
        Expect(lease_token=TOKEN_A),
        Changes(EffectStatus.RECONCILING, reason="probing"),
        [event(EventType.RECONCILING, EffectStatus.RECONCILING)],
        now=clock() + 1,
    )
    assert record.status is EffectStatus.RECONCILING
    assert record.lease_token == claimed.lease_token
    assert record.lease_expires_at == claimed.lease_expires_at
    assert record.arguments == claimed.arguments
    assert (record.attempts, record.attempt_budget) == (1, 3)
    assert record.output_json is None


def test_transition_installs_a_new_lease_from_its_now(ledger, clock):
    """A new lease takes its token and owner, and expires ``seconds`` after the write's now."""
    claimed, _ = ledger.claim(operation(seconds=30), now=clock())
    clock.advance(100)
    record = ledger.transition(
        claimed.operation_id,
        Expect(statuses=frozenset({DISPATCHED}), lease_expired=True),
        Changes(EffectStatus.RECONCILING, lease=Lease(TOKEN_B, OTHER, 12.5), attempts=2),
        [event(EventType.LEASE_EXPIRED, EffectStatus.OUTCOME_UNKNOWN)],
        now=clock(),
    )
    assert (record.lease_token, record.lease_owner, record.attempts) == (TOKEN_B, OTHER, 2)
    assert record.lease_expires_at == from_micros(round(clock() * 1_000_000)) + timedelta(
        seconds=12.5
    )
    assert record.lease_live


def test_stored_json_comes_back_exactly_as_written(ledger, clock):
    """Outputs, arguments and evidence keep their exact JSON text, so hashes still verify."""
    claimed, _ = ledger.claim(operation(), now=clock())
    output = '{"amount":1.0,"big":1e+20,"name":"Zoë","nested":{"b":[1,2.5,null]}}'
    evidence = {"big": 1e20, "tiny": 1.5e-7, "text": "naïve \u2603 \U0001f600", "nul": "a\x00b"}
    ledger.transition(
        claimed.operation_id,
        Expect(lease_token=TOKEN_A),
        Changes(EffectStatus.CONFIRMED, lease=None, output_json=output, evidence=evidence),
        [event(evidence=evidence)],
        now=clock(),
    )
    record = ledger.get(claimed.operation_id, now=clock())
    assert record.output_json == output
    assert record.evidence == evidence
    assert ledger.events(claimed.operation_id)[-1].evidence == evidence
    assert ledger.verify().ok


FENCES = {
    "stale lease token": (Expect(lease_token=TOKEN_Z), "lease token is not the writer's"),
    "lease held when none expected": (Expect(lease_token=None), "lease token is not the writer's"),
    "wrong status": (
        Expect(statuses=frozenset({EffectStatus.QUARANTINED})),
        "status is DISPATCHED, expected QUARANTINED",
    ),
    "live lease when expiry is required": (Expect(lease_expired=True), "lease is still live"),
    "stale event count": (Expect(event_count=0), "operation changed since it was read"),
}


@pytest.mark.parametrize("case", FENCES)
def test_fenced_writes_are_refused_and_change_nothing(ledger, clock, case):
    """A write whose expectation no longer holds raises FencedWriteError and writes nothing."""
    expect, reason = FENCES[case]
    claimed, _ = ledger.claim(operation(), now=clock())
    with pytest.raises(FencedWriteError, match=reason):
        ledger.transition(
            claimed.operation_id,
            expect,
            Changes(EffectStatus.CONFIRMED, lease=None, output_json="1"),
            [event()],
            now=clock() + 1,
        )
    assert ledger.get(claimed.operation_id, now=clock()) == claimed
    assert len(ledger.events(claimed.operation_id)) == 1


def test_a_transition_whose_events_cannot_be_stored_changes_nothing(ledger, ledger_sql, clock):
    """When the events cannot be written, the row keeps its old values: both or neither."""
    claimed, _ = ledger.claim(operation(), now=clock())
    # A stray second event makes the transition's own second event collide.
    ledger_sql(
        "INSERT INTO events SELECT operation_id, 2, type, from_status, to_status, attempt,"
        " {at}, evidence, hash, commits FROM events WHERE operation_id = ? AND seq = 1",
        claimed.operation_id,
    )
    with pytest.raises(LedgerUnavailableError):
        ledger.transition(
            claimed.operation_id,
            Expect(lease_token=TOKEN_A),
            Changes(EffectStatus.CONFIRMED, lease=None, output_json="1"),
            [event()],
            now=clock() + 1,
        )
    assert ledger.get(claimed.operation_id, now=clock()) == claimed
    assert len(ledger.events(claimed.operation_id)) == 2


def test_transition_of_an_unknown_operation_is_not_found(ledger, clock):
    """Writing an operation that was never claimed raises OperationNotFoundError."""
    with pytest.raises(OperationNotFoundError):
        ledger.transition("nope", Expect(), Changes(EffectStatus.CONFIRMED), [event()], now=clock())
    assert ledger.get("nope") is None


def test_an_expired_lease_is_taken_over_and_its_holder_fenced(ledger, clock):
    """After expiry another writer takes the lease; the old holder's writes and renewals fail."""
    claimed, _ = ledger.claim(operation(seconds=30), now=clock())
    clock.advance(31)
    taken = ledger.transition(
        claimed.operation_id,
        Expect(statuses=frozenset({DISPATCHED}), lease_token=TOKEN_A, lease_expired=True),
        Changes(EffectStatus.RECONCILING, lease=Lease(TOKEN_B, OTHER, 30)),
        [event(EventType.LEASE_EXPIRED, EffectStatus.OUTCOME_UNKNOWN)],
        now=clock(),
    )
    with pytest.raises(FencedWriteError):
        ledger.transition(
            claimed.operation_id,
            Expect(lease_token=TOKEN_A),
            Changes(EffectStatus.CONFIRMED, lease=None),
            [event()],
            now=clock(),
        )
    with pytest.raises(FencedWriteError):
        ledger.renew(claimed.operation_id, TOKEN_A, 30, now=clock())
    assert ledger.get(claimed.operation_id, now=clock()) == taken


def test_racing_writers_with_one_expectation_succeed_once(ledger, clock):
    """Of threads racing to take one lease with the same expectation, exactly one wins."""
    claimed, _ = ledger.claim(operation(seconds=30), now=clock())
    clock.advance(60)
    barrier = threading.Barrier(6)
    outcomes: list[str] = []

    def take(index: int) -> None:
        barrier.wait()
        try:
            ledger.transition(
                claimed.operation_id,
                Expect(statuses=frozenset({DISPATCHED}), lease_token=TOKEN_A, lease_expired=True),
                Changes(EffectStatus.RECONCILING, lease=Lease(f"token-{index}", OTHER, 30)),
                [event(EventType.RECONCILING, EffectStatus.RECONCILING)],
                now=clock(),
            )
            outcomes.append(f"token-{index}")
        except FencedWriteError:
            outcomes.append("fenced")

    threads = [threading.Thread(target=take, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [outcome for outcome in outcomes if outcome != "fenced"]
    assert len(winners) == 1
    assert len(outcomes) == 6
    record = ledger.get(claimed.operation_id, now=clock())
    assert (record.lease_token, record.event_count) == (winners[0], 2)
    assert ledger.verify().ok


def test_unfenced_writers_racing_each_extend_the_chain(ledger, clock):
    """Concurrent writes that expect nothing all apply, each on the chain head before it."""
    claimed, _ = ledger.claim(operation(), now=clock())
    barrier = threading.Barrier(6)
    errors: list[BaseException] = []

    def append(index: int) -> None:
        try:
            barrier.wait()
            ledger.transition(
                claimed.operation_id,
                Expect(),
                Changes(DISPATCHED),
                [EventDraft(EventType.LATE_RESULT, DISPATCHED, DISPATCHED, 1, {"writer": index})],
                now=clock(),
            )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=append, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    events = ledger.events(claimed.operation_id)
    assert [e.seq for e in events] == list(range(1, 8))
    assert sorted(e.evidence["writer"] for e in events[1:]) == list(range(6))
    assert ledger.verify().ok


# -- renew and lease expiry ------------------------------------------------------------------


def test_renew_extends_the_lease_from_now(ledger, clock):
    """Renewing sets the expiry to ``now + seconds`` and keeps the lease live past the old one."""
    claimed, _ = ledger.claim(operation(seconds=30), now=clock())
    ledger.renew(claimed.operation_id, TOKEN_A, 30, now=clock() + 20)
    record = ledger.get(claimed.operation_id, now=clock() + 40)
    assert record.lease_live
    assert record.lease_expires_at == claimed.created_at + timedelta(seconds=50)
    assert record.event_count == claimed.event_count


def test_renew_by_a_token_that_does_not_hold_the_lease_is_refused(ledger, clock):
    """Renewing with another token, or an unknown operation, is refused and changes nothing."""
    claimed, _ = ledger.claim(operation(), now=clock())
    with pytest.raises(FencedWriteError):
        ledger.renew(claimed.operation_id, TOKEN_Z, 300, now=clock())
    with pytest.raises(FencedWriteError):
        ledger.renew("nope", TOKEN_A, 300, now=clock())
    assert ledger.get(claimed.operation_id, now=clock()) == claimed


def test_renew_without_now_counts_from_the_ledgers_clock(ledger):
    """Without ``now`` a renewal starts from the ledger's own current time."""
    claimed, _ = ledger.claim(operation(seconds=30))
    ledger.renew(claimed.operation_id, TOKEN_A, 600)
    record = ledger.get(claimed.operation_id)
    assert record.lease_expires_at >= claimed.created_at + timedelta(seconds=600)


def test_lease_liveness_follows_the_injected_now(ledger, clock):
    """A lease is live strictly before its expiry and expired from that instant on."""
    claimed, _ = ledger.claim(operation(seconds=30), now=clock())
    assert ledger.get(claimed.operation_id, now=clock() + 29.999999).lease_live
    assert not ledger.get(claimed.operation_id, now=clock() + 30).lease_live
    expect = Expect(lease_expired=True)
    with pytest.raises(FencedWriteError):
        ledger.transition(
            claimed.operation_id, expect, Changes(DISPATCHED), [], now=clock() + 29.999999
        )
    record = ledger.transition(
        claimed.operation_id,
        expect,
        Changes(EffectStatus.OUTCOME_UNKNOWN, lease=None),
        [event(EventType.LEASE_EXPIRED, EffectStatus.OUTCOME_UNKNOWN)],
        now=clock() + 30,
    )
    assert record.status is EffectStatus.OUTCOME_UNKNOWN


# -- reads -----------------------------------------------------------------------------------


def test_reads_of_an_unknown_operation_are_empty(ledger):
    """``get`` of an unknown id is None and its events are an empty list."""
    assert ledger.get("nope") is None
    assert ledger.events("nope") == []
    assert ledger.list_operations() == []


def test_list_operations_is_newest_first_and_filters(ledger, clock):
    """Listing orders by last update, newest first, filtered by status and contract."""
    for index, contract in enumerate(["capture", "refund", "capture", "refund"]):
        ledger.claim(operation(f"op-{index}", contract=contract), now=clock() + index)
    ledger.transition(
        "op-0",
        Expect(lease_token=TOKEN_A),
        Changes(EffectStatus.CONFIRMED, lease=None, output_json="1"),
        [event()],
        now=clock() + 10,
    )
    ids = [record.operation_id for record in ledger.list_operations()]
    assert ids == ["op-0", "op-3", "op-2", "op-1"]
    confirmed = ledger.list_operations(status=EffectStatus.CONFIRMED)
    assert [r.operation_id for r in confirmed] == ["op-0"]
    dispatched = ledger.list_operations(status=DISPATCHED, contract="capture")
    assert [r.operation_id for r in dispatched] == ["op-2"]
    assert [r.operation_id for r in ledger.list_operations(contract="refund")] == ["op-3", "op-1"]
    assert [r.operation_id for r in ledger.list_operations(limit=2)] == ["op-0", "op-3"]
    for bad in (0, "x", True, 2.5):
        with pytest.raises(InvalidRequestError, match="limit"):
            ledger.list_operations(limit=bad)


def test_a_closed_ledger_refuses_to_serve(make_ledger, clock):
    """Every call on a closed ledger raises LedgerUnavailableError."""
    ledger = make_ledger()
    ledger.claim(operation(), now=clock())
    ledger.close()
    with pytest.raises(LedgerUnavailableError):
        ledger.get("invoice:INV-1:capture")
    with pytest.raises(LedgerUnavailableError):
        ledger.claim(operation("op-2"), now=clock())


def test_many_handles_opening_a_fresh_ledger_at_once_all_work(make_ledger, clock):
    """Handles opened on one fresh ledger by racing threads all create, migrate and write it."""
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def open_and_claim(index: int) -> None:
        try:
            barrier.wait()
            make_ledger().claim(operation(f"op-{index}"), now=clock())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_and_claim, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    report = make_ledger().verify()
    assert report.ok
    assert report.operations_checked == 8
