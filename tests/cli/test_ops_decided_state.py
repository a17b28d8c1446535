"""agent-effect-ops resolutions carry the state they were decided on; racing operators, one winner.

``show`` prints the event count and chain head; ``--expect-events`` and
``--expect-head`` refuse a decision once the operation has moved on. Four
operators racing on one quarantined operation, as separate processes on the
backend under test: exactly one exits 0, and the provider still holds one
payment.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ops_helpers import AUDIT, OP, Run, quarantine

from effectguard import EffectLedger, EffectStatus, EventType

SCRIPT = Path(sys.executable).parent / "agent-effect-ops"
DECIDE_ON = re.compile(r"--expect-events (\d+) --expect-head ([0-9a-f]{16})")


def _seen(run: Run) -> tuple[str, str]:
    shown = run("show", OP).stdout
    found = DECIDE_ON.search(shown)
    assert found is not None, shown
    return found.group(1), found.group(2)


@pytest.mark.usefixtures("quarantined")
def test_show_prints_the_state_to_decide_on_and_json_carries_it(
    run: Run, make_ledger: Callable[..., EffectLedger]
) -> None:
    events, head = _seen(run)
    record = make_ledger().get(OP)
    assert record is not None
    assert events == str(record.event_count)
    assert record.event_head.hex().startswith(head)
    shown = json.loads(run("show", "--json", OP).stdout)
    assert (shown["event_count"], shown["event_head"]) == (
        record.event_count,
        record.event_head.hex(),
    )


@pytest.mark.parametrize(
    "command",
    [
        ["reject"],
        ["authorize-retry"],
        ["confirm", "--output-json", '{"id": "cap_1"}', "--provider-operation-id", "cap_1"],
    ],
    ids=lambda c: c[0],
)
@pytest.mark.usefixtures("quarantined")
def test_a_decision_made_before_the_operation_moved_on_is_refused(
    run: Run, state: Callable[[], Any], command: list[str]
) -> None:
    events, head = _seen(run)
    run("authorize-retry", OP, *AUDIT)  # another operator, on the same state
    before = state()
    for expectation in (
        ["--expect-events", events],
        ["--expect-head", head],
        ["--expect-events", events, "--expect-head", head],
    ):
        refused = run(command[0], OP, *command[1:], *AUDIT, *expectation, code=1)
        assert "changed since you looked: reload" in refused.stderr
        assert "it is now PREPARED" in refused.stderr
    assert state() == before


@pytest.mark.usefixtures("quarantined")
def test_a_decision_on_the_state_shown_lands(
    run: Run, make_ledger: Callable[..., EffectLedger], quarantined: Any
) -> None:
    events, head = _seen(run)
    done = run("reject", OP, *AUDIT, "--expect-events", events, "--expect-head", head)
    assert "rejected" in done.stdout
    record = make_ledger().get(OP)
    assert record is not None
    assert record.status is EffectStatus.REJECTED
    assert quarantined.committed() == 1


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--expect-events", "0", "not an event count"),
        ("--expect-events", "-1", "not an event count"),
        ("--expect-events", "abc", "not an event count"),
        ("--expect-events", "9" * 40, "not an event count"),
        ("--expect-head", "abc", "16 to 64 hex digits"),
        ("--expect-head", "g" * 16, "16 to 64 hex digits"),
        ("--expect-head", "a" * 5000, "16 to 64 hex digits"),
    ],
)
@pytest.mark.usefixtures("quarantined")
def test_a_malformed_expectation_is_a_usage_error_that_changes_nothing(
    run: Run, state: Callable[[], Any], option: str, value: str, says: str
) -> None:
    before = state()
    refused = run("reject", OP, *AUDIT, option, value, code=2)
    assert says in refused.stderr
    assert len(refused.stderr) < 400
    assert state() == before


RACERS = (
    ["confirm", "--output-json", '{"id": "cap_1"}', "--provider-operation-id", "cap_1"],
    ["reject"],
    ["authorize-retry"],
    ["confirm", "--output-json", '{"id": "other"}', "--provider-operation-id", "other"],
)


@pytest.mark.parametrize("round_", range(6))
def test_four_operators_racing_on_one_operation_give_exactly_one_winner(
    make_ledger: Callable[..., EffectLedger], ledger_target: str, round_: int
) -> None:
    ledger = make_ledger()
    provider = quarantine(ledger)
    record = ledger.get(OP)
    assert record is not None
    before = record.event_count
    # Each operator decided on what show printed them: the same state.
    seen = ["--expect-events", str(before), "--expect-head", record.event_head.hex()[:16]]
    order = RACERS[round_ % 4 :] + RACERS[: round_ % 4]
    processes = [
        subprocess.Popen(
            [str(SCRIPT), "--db", ledger_target, command[0], OP, *command[1:], *AUDIT, *seen],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for command in order
    ]
    outcomes = [(process.wait(timeout=60), *process.communicate()) for process in processes]
    winners = [out for out in outcomes if out[0] == 0]
    assert len(winners) == 1, outcomes
    for code, _, stderr in outcomes:
        if code != 0:
            assert code == 1, stderr
            assert "changed since you looked: reload" in stderr, stderr
    after = make_ledger().get(OP)
    assert after is not None
    assert after.event_count == before + 1
    operator_events = [e for e in ledger.events(OP) if e.type.value.startswith("operator")]
    assert len(operator_events) == 1
    assert operator_events[0].type in {
        EventType.OPERATOR_CONFIRMED,
        EventType.OPERATOR_REJECTED,
        EventType.OPERATOR_RETRY_AUTHORIZED,
    }
    assert provider.committed() == 1
    assert ledger.verify().ok
