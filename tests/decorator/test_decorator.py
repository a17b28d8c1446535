"""@effect on plain functions, methods, staticmethods and classmethods: calls, results, errors."""

from __future__ import annotations

import functools
import inspect
import threading
from typing import Any

import pytest

from effectguard import (
    INJECTED,
    EffectExecutor,
    EffectInProgress,
    EffectNotConfirmed,
    EffectOutcomeUnknown,
    EffectQuarantined,
    EffectRejected,
    EffectStatus,
    OperationConflictError,
    OutcomeProbeResult,
    UnknownOutcomePolicy,
    effect,
    get_contract,
    is_effect,
    use_executor,
)
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan


@pytest.fixture
def executor(ledger, clock) -> EffectExecutor:
    """An executor over this test's ledger, on the hand-moved clock."""
    return EffectExecutor(ledger, clock=clock)


@pytest.fixture
def provider() -> FakePaymentProvider:
    """A payment provider with Stripe-like keys and a strong lookup."""
    return FakePaymentProvider()


def capture_tool(executor: EffectExecutor, provider: FakePaymentProvider, **options: Any) -> Any:
    """Return a decorated capture whose probe is called like the tool."""

    def find_capture(invoice_id: str, amount_cents: int, *, idempotency_key: str) -> Any:
        return provider.probe({"invoice_id": invoice_id}, idempotency_key=idempotency_key)

    settings: dict[str, Any] = {
        "operation_id": "invoice:{invoice_id}:capture",
        "idempotency_key": "capture:{invoice_id}",
        "probe": find_capture,
        "executor": executor,
    }
    settings.update(options)

    @effect(**settings)
    def capture(invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED) -> Any:
        """Capture a payment."""
        return provider.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)

    return capture


# -- the decorated function is still the function ------------------------------------------


def test_metadata_and_signature_are_the_originals():
    """Name, docstring, module, __wrapped__ and signature (less the key) are the original's."""

    def original(invoice_id: str, amount_cents: int = 5, *, idempotency_key: str) -> dict:
        """Capture a payment."""
        return {}

    decorated = effect(operation_id="invoice:{invoice_id}")(original)
    assert decorated.__name__ == "original"
    assert decorated.__qualname__ == original.__qualname__
    assert decorated.__doc__ == "Capture a payment."
    assert decorated.__module__ == __name__
    assert decorated.__wrapped__ is original
    original_signature = inspect.signature(original)
    assert inspect.signature(decorated) == original_signature.replace(
        parameters=list(original_signature.parameters.values())[:2]
    )
    assert not inspect.iscoroutinefunction(decorated)


def test_default_contract_name_is_the_qualified_module_path():
    """Without name=, the contract is named after the function's module and qualified name."""

    @effect(operation_id="x:{n}")
    def job(n: int) -> int:
        return n

    assert job.contract.name == f"{__name__}.{job.__qualname__}"
    named = effect(operation_id="x:{n}", name="billing.job", version=2)(lambda n: n)
    assert (named.contract.name, named.contract.version) == ("billing.job", 2)


def test_generators_are_refused_at_decoration():
    """Generator and async generator functions are a TypeError: their output cannot be replayed."""

    def numbers(n: int) -> Any:
        yield n

    async def stream(n: int) -> Any:
        yield n

    for func in (numbers, stream):
        with pytest.raises(TypeError, match="generator function"):
            effect(operation_id="x:{n}")(func)


def test_bare_decorator_and_classes_are_refused():
    """@effect without arguments, or on a class, is a clear TypeError."""

    def job(n: int) -> int:
        return n

    with pytest.raises(TypeError, match="operation_id"):
        effect(job)  # type: ignore[call-arg, misc]
    with pytest.raises(TypeError, match="keyword arguments only"):
        effect(job, operation_id="x")  # type: ignore[misc]
    with pytest.raises(TypeError, match="function or method"):
        effect(operation_id="x")(dict)


# -- what a call returns or raises ---------------------------------------------------------


def test_call_returns_the_output_and_a_second_call_replays_it(ledger, executor, provider):
    """A CONFIRMED call returns the output; the same call again replays it without dispatch."""
    capture = capture_tool(executor, provider)
    first = capture("INV-1", 100)
    assert first["status"] == "succeeded"
    assert capture("INV-1", 100) == first
    assert provider.committed() == 1
    result = capture.execute("INV-1", 100)
    assert (result.status, result.replayed, result.output) == (EffectStatus.CONFIRMED, True, first)
    record = ledger.get("invoice:INV-1:capture")
    assert record.arguments == {"invoice_id": "INV-1", "amount_cents": 100}
    assert record.provider_key == "capture:INV-1"


def test_lost_acknowledgement_is_settled_by_the_probe(executor):
    """A lost ack is reconciled by the probe: the call returns the output, one effect exists."""
    provider = FakePaymentProvider(idempotency_guaranteed=False, faults=FaultPlan([Fault.LOSE_ACK]))
    capture = capture_tool(executor, provider)
    output = capture("INV-7", 700)
    assert output["invoice_id"] == "INV-7"
    assert provider.committed() == 1
    result = capture.execute("INV-7", 700)
    assert result.replayed
    assert result.evidence["probe"] == "COMMITTED"
    assert provider.committed() == 1


def test_rejection_raises_effect_rejected_carrying_the_result(executor, provider):
    """A handler's EffectRejected makes the call raise EffectRejected with the REJECTED result."""
    calls = []

    @effect(operation_id="charge:{card}", executor=executor)
    def charge(card: str) -> dict:
        calls.append(card)
        raise EffectRejected("card declined", evidence={"code": "card_declined"})

    with pytest.raises(EffectRejected) as first:
        charge("4000")
    assert first.value.result is not None
    assert first.value.result.status is EffectStatus.REJECTED
    assert not first.value.result.replayed
    assert first.value.evidence == {"code": "card_declined"}
    with pytest.raises(EffectRejected, match="card declined") as again:
        charge("4000")
    assert again.value.result is not None
    assert again.value.result.replayed
    assert calls == ["4000"]


def test_uncertain_outcome_without_evidence_is_quarantined(executor):
    """No probe and no guarantee: the call raises EffectQuarantined; the provider holds one."""
    provider = FakePaymentProvider(idempotency_guaranteed=False, faults=FaultPlan([Fault.LOSE_ACK]))
    capture = capture_tool(executor, provider, probe=None)
    with pytest.raises(EffectQuarantined) as info:
        capture("INV-2", 200)
    assert isinstance(info.value, EffectNotConfirmed)
    assert info.value.result.status is EffectStatus.QUARANTINED
    assert info.value.result.operation_id == "invoice:INV-2:capture"
    with pytest.raises(EffectQuarantined):
        capture("INV-2", 200)
    assert capture.execute("INV-2", 200).status is EffectStatus.QUARANTINED  # returned, not raised
    assert provider.committed() == 1


def test_pending_outcome_raises_effect_outcome_unknown(executor, clock):
    """A probe still PENDING at the call's deadline leaves OUTCOME_UNKNOWN: EffectOutcomeUnknown."""
    provider = FakePaymentProvider(faults=FaultPlan([Fault.PENDING], pending_probes=10_000))
    capture = capture_tool(executor, provider, unknown_outcome="keep_unknown", deadline=2.0)
    started = clock()
    with pytest.raises(EffectOutcomeUnknown) as info:
        capture("INV-3", 300)
    assert info.value.result.status is EffectStatus.OUTCOME_UNKNOWN
    assert capture.contract.unknown_outcome is UnknownOutcomePolicy.KEEP_UNKNOWN
    assert provider.committed() == 0
    assert provider.requests == 1
    assert 0 < clock() - started <= 2.0


def test_operation_held_by_another_worker_raises_effect_in_progress(executor):
    """With wait_for_peer=0, a call finding another worker raises EffectInProgress at once."""
    started, release = threading.Event(), threading.Event()
    dispatched: list[int] = []
    results: list[Any] = []

    @effect(operation_id="job:{n}", executor=executor, wait_for_peer=0)
    def job(n: int) -> dict:
        dispatched.append(n)
        started.set()
        release.wait(10)
        return {"n": n}

    worker = threading.Thread(target=lambda: results.append(job(1)))
    worker.start()
    try:
        assert started.wait(10)
        with pytest.raises(EffectInProgress) as info:
            job(1)
        assert info.value.result.status is EffectStatus.DISPATCHED
    finally:
        release.set()
        worker.join(10)
    assert results == [{"n": 1}]
    assert dispatched == [1]
    assert job(1) == {"n": 1}


def test_same_operation_with_other_arguments_is_a_conflict(executor, provider):
    """Reusing an operation id with different arguments raises OperationConflictError."""
    capture = capture_tool(executor, provider)
    capture("INV-4", 400)
    with pytest.raises(OperationConflictError):
        capture("INV-4", 999)
    assert provider.committed() == 1


# -- arguments and the idempotency key ------------------------------------------------------


def test_executor_injects_the_key_and_callers_may_not_pass_it(ledger, executor, provider):
    """The tool receives the key from the template; a caller passing one is a TypeError."""
    capture = capture_tool(executor, provider)
    with pytest.raises(TypeError, match="idempotency_key"):
        capture("INV-5", 500, idempotency_key="mine")
    assert ledger.list_operations() == []
    capture("INV-5", 500)
    assert provider.effects()[0]["request"] == {"invoice_id": "INV-5", "amount_cents": 500}
    assert provider.committed("capture:INV-5") == 1


def test_key_defaults_to_the_operation_id(executor):
    """A tool that takes idempotency_key but names no key template gets the operation id."""
    seen = []

    @effect(operation_id="refund:{refund_id}", executor=executor)
    def refund(refund_id: str, *, idempotency_key: str = INJECTED) -> str:
        seen.append(idempotency_key)
        return "ok"

    refund("R-1")
    assert seen == ["refund:R-1"]


def test_arguments_bind_like_the_function_with_defaults(ledger, executor):
    """Arguments are bound to the signature with defaults applied; a bad call is a TypeError."""
    received = []

    @effect(operation_id=lambda args: f"mail:{args['to']}:{args['subject']}", executor=executor)
    def send(to: str, subject: str = "hello", *tags: str, **headers: str) -> str:
        received.append((to, subject, tags, headers))
        return "sent"

    assert send("a@example.com", "hi", "x", "y", priority="high") == "sent"
    assert received == [("a@example.com", "hi", ("x", "y"), {"priority": "high"})]
    send(to="b@example.com")
    record = ledger.get("mail:b@example.com:hello")
    assert record.arguments == {
        "to": "b@example.com",
        "subject": "hello",
        "tags": [],
        "headers": {},
    }
    with pytest.raises(TypeError, match="send"):
        send()
    with pytest.raises(TypeError, match="not JSON-encodable"):
        send("c@example.com", "obj", when=object())
    assert ledger.get("mail:c@example.com:obj") is None


# -- methods, staticmethods, classmethods -----------------------------------------------------


class Billing:
    """A client class whose methods are guarded tools."""

    def __init__(self, provider: FakePaymentProvider, executor: EffectExecutor) -> None:
        self.provider = provider
        self.executor = executor
        self.probed_by: list[Billing] = []

    def find_capture(self, invoice_id: str, amount_cents: int, *, idempotency_key: str) -> Any:  # noqa: ARG002 - a probe is called like the tool
        """Look the capture up at this client's provider."""
        self.probed_by.append(self)
        return self.provider.probe({"invoice_id": invoice_id}, idempotency_key=idempotency_key)

    @effect(
        operation_id="invoice:{invoice_id}:capture",
        idempotency_key="capture:{invoice_id}",
        probe=find_capture,
    )
    def capture(
        self, invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED
    ) -> Any:
        """Capture through this client's provider."""
        return self.provider.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)

    @effect(operation_id="ping:{n}")
    @staticmethod
    def ping(n: int) -> int:
        """Double n."""
        return n * 2

    @staticmethod
    @effect(operation_id="pong:{n}")
    def pong(n: int) -> int:
        """Triple n."""
        return n * 3

    @effect(operation_id="make:{n}")
    @classmethod
    def make(cls, n: int) -> str:
        """Name n after the class."""
        return f"{cls.__name__}:{n}"

    @classmethod
    @effect(operation_id="build:{n}")
    def build(cls, n: int) -> str:
        """Name n after the class."""
        return f"{cls.__name__}:{n}"


def test_method_on_an_instance_excludes_self_and_probes_on_the_same_instance(ledger, executor):
    """A method runs on its instance; self is not an argument; its probe runs on that instance."""
    provider = FakePaymentProvider(idempotency_guaranteed=False, faults=FaultPlan([Fault.LOSE_ACK]))
    billing = Billing(provider, executor)
    with use_executor(executor):
        output = billing.capture("INV-8", 800)
        assert Billing.capture(billing, "INV-8", 800) == output
    assert billing.probed_by == [billing]
    assert provider.committed() == 1
    assert ledger.get("invoice:INV-8:capture").arguments == {
        "invoice_id": "INV-8",
        "amount_cents": 800,
    }
    assert billing.capture.__doc__ == "Capture through this client's provider."
    assert list(inspect.signature(billing.capture).parameters) == ["invoice_id", "amount_cents"]


def test_staticmethods_and_classmethods_in_either_order(ledger, executor):
    """Static and class methods work with @effect above or below the descriptor."""
    billing = Billing(FakePaymentProvider(), executor)
    with use_executor(executor):
        assert (Billing.ping(2), billing.ping(2)) == (4, 4)
        assert (Billing.pong(2), billing.pong(2)) == (6, 6)
        assert (Billing.make(1), billing.make(1)) == ("Billing:1", "Billing:1")
        assert (Billing.build(1), billing.build(1)) == ("Billing:1", "Billing:1")
        assert Billing.make.execute(1).replayed
    assert ledger.get("make:1").arguments == {"n": 1}
    assert ledger.get("build:1").arguments == {"n": 1}


def test_probe_must_accept_what_the_tool_passes():
    """A probe missing one of the tool's parameters is refused at decoration; **_ accepts all."""

    def find(invoice_id: str, *, idempotency_key: str) -> OutcomeProbeResult:
        return OutcomeProbeResult.unknown()

    def lenient(invoice_id: str, **_: Any) -> OutcomeProbeResult:
        return OutcomeProbeResult.unknown()

    def tool(invoice_id: str, amount_cents: int) -> None:
        return None

    with pytest.raises(ValueError, match="does not accept amount_cents"):
        effect(operation_id="i:{invoice_id}", probe=find)(tool)
    assert effect(operation_id="i:{invoice_id}", probe=lenient)(tool).contract.outcome_probe


# -- finding contracts -------------------------------------------------------------------------


def test_get_contract_finds_functions_methods_and_descriptors():
    """get_contract and is_effect see through binding, descriptors and functools.wraps."""

    @effect(operation_id="x:{n}")
    def job(n: int) -> int:
        return n

    @functools.wraps(job)
    def outer(*args: Any, **kwargs: Any) -> Any:
        return job(*args, **kwargs)

    billing = Billing(FakePaymentProvider(), None)  # type: ignore[arg-type]
    reachable = [
        job,
        outer,
        billing.capture,
        Billing.capture,
        Billing.__dict__["ping"],
        Billing.__dict__["pong"],
        Billing.__dict__["make"],
        Billing.__dict__["build"],
        Billing.make,
        billing.build,
    ]
    for obj in reachable:
        assert is_effect(obj), obj
        assert get_contract(obj) is not None
    assert get_contract(billing.capture) is Billing.capture.contract
    assert get_contract(outer) is job.contract
    for obj in (billing.find_capture, len, 3, None, Billing):
        assert not is_effect(obj)
        assert get_contract(obj) is None


def test_options_reach_the_contract():
    """Each @effect option lands in the contract, timedeltas as seconds."""
    from datetime import timedelta  # noqa: PLC0415 - used by this test only

    def find(invoice_id: str, **_: Any) -> OutcomeProbeResult:
        return OutcomeProbeResult.unknown()

    @effect(
        operation_id="invoice:{invoice_id}",
        idempotency_key="key:{invoice_id}",
        idempotency_guaranteed=True,
        probe=find,
        postcondition=bool,
        unknown_outcome=UnknownOutcomePolicy.KEEP_UNKNOWN,
        timeout=timedelta(seconds=2),
        lease=timedelta(minutes=1),
        max_attempts=5,
        redact=["card"],
        provider_key_retention=timedelta(hours=24),
        max_output_bytes=4096,
    )
    def capture(invoice_id: str, card: str, *, idempotency_key: str = INJECTED) -> dict:
        return {}

    contract = capture.contract
    assert contract.operation_id({"invoice_id": "I-1", "card": "x"}) == "invoice:I-1"
    assert contract.provider_idempotency_key({"invoice_id": "I-1"}) == "key:I-1"
    assert contract.provider_idempotency_guaranteed
    assert contract.postcondition is bool
    assert contract.unknown_outcome is UnknownOutcomePolicy.KEEP_UNKNOWN
    assert (contract.handler_timeout, contract.lease_seconds) == (2.0, 60.0)
    assert contract.max_attempts == 5
    assert contract.redact == frozenset({"card"})
    assert contract.provider_key_retention_seconds == 86400.0
    assert contract.max_output_bytes == 4096
    assert contract.codec is None


def test_postcondition_and_provider_operation_id(executor, provider):
    """provider_operation_id may name an output field; a failing postcondition never confirms."""
    capture = capture_tool(
        executor,
        provider,
        provider_operation_id="id",
        postcondition=lambda out: out["amount_cents"] > 0,
    )
    result = capture.execute("INV-20", 100)
    assert result.provider_operation_id == result.output["id"]
    with pytest.raises(EffectNotConfirmed):
        capture("INV-21", -5)
    assert provider.committed() == 2
    assert capture.execute("INV-21", -5).status is not EffectStatus.CONFIRMED


class Registry:
    """Tools whose probes are a staticmethod and a classmethod of their class."""

    committed: list[str] = []  # noqa: RUF012 - shared on purpose, like a provider's state

    @staticmethod
    def lookup(name: str) -> OutcomeProbeResult:
        """Find a registration by name."""
        if name in Registry.committed:
            return OutcomeProbeResult.committed({"name": name})
        return OutcomeProbeResult.not_committed()

    @classmethod
    def lookup_class(cls, name: str) -> OutcomeProbeResult:
        """Find a registration by name, through the class."""
        return cls.lookup(name)

    @effect(operation_id="register:{name}", probe=lookup)
    def register(self, name: str) -> dict:
        """Register, losing the acknowledgement of the first try."""
        Registry.committed.append(name)
        raise TimeoutError

    @effect(operation_id="enrol:{name}", probe=lookup_class)
    @classmethod
    def enrol(cls, name: str) -> dict:
        """Enrol, losing the acknowledgement of the first try."""
        Registry.committed.append(name)
        raise TimeoutError


def test_staticmethod_and_classmethod_probes(executor):
    """A staticmethod probe is called plainly and a classmethod probe on the tool's class."""
    Registry.committed.clear()
    with use_executor(executor):
        assert Registry().register("a") == {"name": "a"}
        assert Registry.enrol("b") == {"name": "b"}
    assert Registry.committed == ["a", "b"]
