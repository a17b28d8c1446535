"""The pytest plugin's fixtures, used from a test file outside the package."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

pytest_plugins = ["pytester"]

USER_TESTS = """
import threading

from effectguard import INJECTED, EffectContract, EffectStatus, effect
from effectguard.testkit import FakeEmailProvider, Fault

ARGUMENTS = {"invoice_id": "INV-1", "amount_cents": 500}


def capture_contract(provider, **options):
    return EffectContract(
        name="capture",
        operation_id=lambda a: f"invoice:{a['invoice_id']}:capture",
        provider_idempotency_key=lambda a: f"capture:{a['invoice_id']}",
        outcome_probe=provider.probe,
        **options,
    )


def test_lost_ack_is_captured_once(
    effect_executor, fake_payments, fault_plan, assert_committed_once
):
    fault_plan.set(1, Fault.LOSE_ACK)
    contract = capture_contract(fake_payments, provider_idempotency_guaranteed=True)
    result = effect_executor.execute(contract, ARGUMENTS, fake_payments.handler)
    assert result.status is EffectStatus.CONFIRMED
    assert_committed_once(fake_payments, "capture:INV-1")


def test_welcome_email_is_sent_once(
    effect_executor, fake_email, fault_plan, assert_committed_once
):
    fault_plan.set(1, Fault.FAIL_BEFORE_COMMIT)
    contract = EffectContract(
        name="welcome",
        operation_id=lambda a: "welcome:" + a["user"],
        provider_idempotency_key=lambda a: FakeEmailProvider.message_id_for("welcome:" + a["user"]),
        outcome_probe=fake_email.probe,
    )

    def send(arguments, *, idempotency_key):
        to = arguments["user"] + "@example.test"
        return fake_email.send(to, "Welcome", "Hi", message_id=idempotency_key)

    result = effect_executor.execute(contract, {"user": "ada"}, send)
    assert result.status is EffectStatus.CONFIRMED
    assert result.attempts == 2
    assert_committed_once(fake_email, FakeEmailProvider.message_id_for("welcome:ada"))


def test_lease_expires_on_the_injected_clock(
    effect_executor, effect_clock, effect_ledger, fake_payments, fault_plan
):
    fault_plan.set(1, Fault.LATE_COMMIT)
    fake_payments.idempotency_guaranteed = False
    contract = capture_contract(fake_payments, lease_seconds=10)

    def call():
        return effect_executor.execute(contract, ARGUMENTS, fake_payments.handler)

    worker = threading.Thread(target=call)
    worker.start()
    assert fake_payments.wait_until_held(1)
    assert call().status is EffectStatus.DISPATCHED
    effect_clock.advance(11)
    assert call().status is EffectStatus.OUTCOME_UNKNOWN
    fake_payments.release_late()
    worker.join(30)
    assert effect_ledger.get("invoice:INV-1:capture").status is EffectStatus.CONFIRMED
    assert fake_payments.committed() == 1


def test_a_decorated_tool_is_captured_once(
    effect_executor, fake_payments, fault_plan, assert_committed_once
):
    fake_payments.idempotency_guaranteed = False  # only the probe can make this safe
    fault_plan.set(1, Fault.LOSE_ACK)

    def find_capture(invoice_id, amount_cents, *, idempotency_key):
        return fake_payments.probe({"invoice_id": invoice_id}, idempotency_key=idempotency_key)

    @effect(
        operation_id="invoice:{invoice_id}:capture",
        idempotency_key="capture:{invoice_id}",
        probe=find_capture,
        executor=effect_executor,
    )
    def capture(invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED) -> dict:
        return fake_payments.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)

    receipt = capture("INV-9", 900)
    assert capture("INV-9", 900) == receipt
    assert_committed_once(fake_payments, "capture:INV-9")


def test_a_naive_retry_is_caught(fake_payments, fault_plan, assert_committed_once):
    fake_payments.idempotency_guaranteed = False
    fault_plan.set(1, Fault.LOSE_ACK)
    for _ in range(2):  # "retry on timeout", the bug the fixture must catch
        try:
            fake_payments.capture("INV-3", 100, idempotency_key="capture:INV-3")
            break
        except Exception:
            continue
    assert_committed_once(fake_payments, "capture:INV-3")
"""


def test_fixtures_work_from_a_user_test_file(pytester):
    """A user's test file gets every fixture from the installed plugin, with no conftest."""
    pytester.makepyfile(test_user_tool=USER_TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=4, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_a_naive_retry_is_caught*",
            "*expected exactly one committed effect under 'capture:INV-3', the provider holds 2*",
        ]
    )


def test_plugin_is_registered_under_its_entry_point_name(pytester):
    """The plugin loads as 'effectguard' and can be disabled with -p no:effectguard."""
    pytester.makepyfile(
        test_names="""
        def test_uses_a_fixture(effect_ledger):
            assert effect_ledger.list_operations() == []
        """
    )
    assert pytester.runpytest("-p", "no:cacheprovider").ret == 0
    disabled = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:effectguard")
    disabled.stdout.fnmatch_lines(["*fixture 'effect_ledger' not found*"])


def test_plugin_fixtures_sit_beside_this_suites_own(ledger, effect_ledger, clock, effect_clock):
    """Our own conftest's ledger and clock and the plugin's fixtures coexist without clashing."""
    assert ledger is not effect_ledger
    assert effect_ledger.path.name == "effectguard-ledger.db"
    effect_clock.advance(5)
    assert clock() != effect_clock()


def test_loading_the_plugin_loads_no_executor_ledger_or_fakes():
    """Every pytest run of everyone who installed effectguard loads the plugin: it stays cheap."""
    code = textwrap.dedent(
        """
        import json, sys
        import effectguard.testkit.pytest_plugin
        print(json.dumps(sorted(sys.modules)))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = set(json.loads(done.stdout.splitlines()[-1]))
    heavy = {
        "effectguard._executor",
        "effectguard._decorator",
        "effectguard.ledger",
        "effectguard.ledger.sqlite",
        "effectguard.testkit.fakes",
        "sqlite3",
        "wrapt",
    }
    assert loaded.isdisjoint(heavy), sorted(loaded & heavy)
    assert "effectguard.testkit.pytest_plugin" in loaded
