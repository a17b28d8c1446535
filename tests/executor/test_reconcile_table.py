"""The reconcile table, row by row."""

from __future__ import annotations

import pytest

from effectguard import OutcomeProbeResult, UnknownOutcomePolicy
from effectguard._executor._machine import Verdict, decide

COMMITTED = OutcomeProbeResult.committed({"id": "x"})
NOT_COMMITTED = OutcomeProbeResult.not_committed()
PENDING = OutcomeProbeResult.pending()
UNKNOWN = OutcomeProbeResult.unknown()
Q, K = UnknownOutcomePolicy.QUARANTINE, UnknownOutcomePolicy.KEEP_UNKNOWN

ROWS = [
    # probe, confirmable, guaranteed, overlap, attempts left, policy -> verdict
    (COMMITTED, True, False, True, False, Q, Verdict.CONFIRM),
    (COMMITTED, False, True, False, True, Q, Verdict.QUARANTINE),
    (COMMITTED, False, True, False, True, K, Verdict.KEEP_UNKNOWN),
    (NOT_COMMITTED, False, False, False, True, Q, Verdict.RETRY),
    (NOT_COMMITTED, False, False, True, True, Q, Verdict.KEEP_UNKNOWN),
    (NOT_COMMITTED, False, True, True, True, Q, Verdict.RETRY),
    (NOT_COMMITTED, False, False, False, False, Q, Verdict.QUARANTINE),
    (PENDING, False, True, False, True, Q, Verdict.KEEP_UNKNOWN),
    (UNKNOWN, False, True, True, True, Q, Verdict.RETRY),
    (UNKNOWN, False, False, False, True, Q, Verdict.QUARANTINE),
    (UNKNOWN, False, False, False, True, K, Verdict.KEEP_UNKNOWN),
    (None, False, True, False, True, Q, Verdict.RETRY),
    (None, False, True, False, False, K, Verdict.QUARANTINE),
    (None, False, False, False, True, Q, Verdict.QUARANTINE),
]


@pytest.mark.parametrize(
    ("probe", "confirmable", "guaranteed", "overlap", "left", "policy", "verdict"), ROWS
)
def test_reconcile_row(probe, confirmable, guaranteed, overlap, left, policy, verdict):
    """Each combination of evidence and guarantees maps to the documented verdict."""
    decision = decide(
        probe,
        confirmable=confirmable,
        guaranteed=guaranteed,
        overlap_risk=overlap,
        attempts_left=left,
        policy=policy,
    )
    assert decision.verdict is verdict
    assert decision.reason
