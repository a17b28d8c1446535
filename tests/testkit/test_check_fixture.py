"""The ``effect_check`` fixture: the checker's episodes in a user's own test suite."""

from __future__ import annotations

import textwrap

pytest_plugins = ["pytester"]

# A user's module: two tools over one file-backed fake provider (so the checker's child
# processes commit where this process counts), one honest, one whose probe lies.
SHOP = """
from pathlib import Path

from effectguard import OutcomeProbeResult, effect
from effectguard.testkit import FakePaymentProvider, Lookup

PROVIDER = FakePaymentProvider(
    idempotency_guaranteed=False, lookup=Lookup.STRONG, path=Path(__file__).with_name("p.db")
)


@effect(
    operation_id="invoice:{invoice_id}:capture",
    idempotency_key="capture:{invoice_id}",
    probe=lambda invoice_id, amount_cents, idempotency_key: PROVIDER.probe(
        {"invoice_id": invoice_id}, idempotency_key=idempotency_key
    ),
)
def capture(invoice_id: str, amount_cents: int, idempotency_key: str) -> dict:
    return PROVIDER.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)


@effect(
    operation_id="invoice:{invoice_id}:lying-capture",
    idempotency_key="lying:{invoice_id}",
    probe=lambda invoice_id, amount_cents, idempotency_key: OutcomeProbeResult.not_committed(
        {"lookup": "never finds anything"}
    ),
)
def lying_capture(invoice_id: str, amount_cents: int, idempotency_key: str) -> dict:
    return PROVIDER.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)


def count(operation_id: str, idempotency_key: str | None) -> int:
    return PROVIDER.committed(idempotency_key)


async def _look_up(invoice_id: str, amount_cents: int, idempotency_key: str) -> OutcomeProbeResult:
    return PROVIDER.probe({"invoice_id": invoice_id}, idempotency_key=idempotency_key)


@effect(
    operation_id="invoice:{invoice_id}:async-capture",
    idempotency_key="async:{invoice_id}",
    probe=_look_up,
)
async def async_capture(invoice_id: str, amount_cents: int, idempotency_key: str) -> dict:
    return PROVIDER.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)
"""

USER_TESTS = """
import shop


def test_capture_holds(effect_check):
    report = effect_check(shop.capture, shop.count, same_request=["amount_cents"])
    assert report.held
    assert all(e.judged and e.effects == 1 for e in report.episodes)
    assert {e.fault for e in report.episodes} >= {"kill-after-send", "race"}
    # Counted at the provider itself, not by the report.
    for episode in report.episodes:
        assert shop.PROVIDER.committed(episode.idempotency_key) == 1


def test_async_capture_holds(effect_check):
    report = effect_check(shop.async_capture, shop.count, same_request=["amount_cents"])
    assert report.held
    for episode in report.episodes:
        assert shop.PROVIDER.committed(episode.idempotency_key) == 1


def test_lying_capture_fails(effect_check):
    effect_check(shop.lying_capture, shop.count, same_request=["amount_cents"], processes=2)


def test_not_a_tool_fails_in_one_line(effect_check):
    effect_check(shop.count)
"""


def test_the_fixture_passes_an_honest_tool_and_fails_a_lying_one_with_the_receipt(pytester):
    """In a user's own suite: two passes (one async), a broken probe named, a bad input."""
    pytester.makepyfile(shop=textwrap.dedent(SHOP), test_shop=textwrap.dedent(USER_TESTS))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=2)
    output = result.stdout.str()
    assert "BROKEN:" in output
    assert "claim probe: BROKEN - the probe answered NOT_COMMITTED" in output
    assert "kill-after-send" in output
    assert "reproduce: agent-effect check shop:lying_capture" in output
    assert "effect_check: tool 'shop:count' is not an @effect tool" in output
    # The lying tool's lost acknowledgement really doubled a capture at the provider.
    probe = pytester.path / "count_lost_ack.py"
    probe.write_text(
        "import shop\n"
        "keys = {'lying:' + e['request']['invoice_id'] for e in shop.PROVIDER.effects()}\n"
        "print(max(shop.PROVIDER.committed(key) for key in keys))\n",
        encoding="utf-8",
    )
    counted = pytester.run("python", str(probe))
    assert counted.stdout.lines[-1] == "2"
