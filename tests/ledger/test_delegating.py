"""DelegatingLedger: every EffectLedger primitive forwarded unchanged, and no optional hook."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest
from support import ARGS, OPERATION, capture_contract

from benchmarks._counting import CountingLedger
from effectguard import EffectExecutor, EffectLedger, EffectStatus, open_ledger
from effectguard.ledger import Prunable
from effectguard.ledger._protocol import claims_first
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan
from effectguard.testkit._ledgers import DelegatingLedger
from proofs.matrix.contention import FenceCounter

#: Every method the EffectLedger protocol names, read from the protocol itself.
PROTOCOL_METHODS = sorted(
    name
    for name, value in vars(EffectLedger).items()
    if callable(value) and not name.startswith("_")
)


class Recorder:
    """An inner ledger that records each call it receives and answers with a marker."""

    claims_first = True

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.answer = object()

    def __getattr__(self, name: str) -> Any:
        def record(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, args, kwargs))
            return self.answer

        return record


def _arguments(name: str) -> tuple[list[Any], dict[str, Any]]:
    """A distinct marker for every parameter of the protocol's ``name``."""
    positional: list[Any] = []
    keywords: dict[str, Any] = {}
    for parameter in list(inspect.signature(getattr(EffectLedger, name)).parameters.values())[1:]:
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY:
            keywords[parameter.name] = object()
        else:
            positional.append(object())
    return positional, keywords


def _bound(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    signature = inspect.signature(getattr(EffectLedger, name))
    return dict(signature.bind(None, *args, **kwargs).arguments)


def test_the_protocol_names_the_primitives_the_executor_uses():
    """The introspection finds the protocol's methods (so the next test checks something)."""
    assert {"claim", "transition", "renew", "get", "close"} <= set(PROTOCOL_METHODS)


@pytest.mark.parametrize("name", PROTOCOL_METHODS)
def test_every_protocol_method_is_forwarded_with_its_arguments_and_answer(name: str):
    """Each EffectLedger method, defined on the base, reaches ``inner`` with the same arguments."""
    assert name in vars(DelegatingLedger), f"DelegatingLedger does not forward {name}"
    inner = Recorder()
    positional, keywords = _arguments(name)

    answer = getattr(DelegatingLedger(inner), name)(*positional, **keywords)  # type: ignore[arg-type]

    [(called, args, kwargs)] = inner.calls
    assert called == name
    assert _bound(name, args, kwargs) == _bound(name, tuple(positional), keywords)
    returns = inspect.signature(getattr(EffectLedger, name)).return_annotation
    assert answer is (None if returns == "None" else inner.answer)


def test_every_wrapper_shows_the_ledgers_claims_first():
    """A call through a wrapper takes production's path: claims_first shows through each.

    The matrix's counter hid it once, so the PostgreSQL matrix never ran the
    claim-first path PostgreSQL takes in production.
    """
    for answer in (True, False):
        inner = Recorder()
        inner.claims_first = answer
        for wrapper in (DelegatingLedger, FenceCounter, CountingLedger):
            assert claims_first(wrapper(inner)) is answer, wrapper  # type: ignore[arg-type]


def test_a_delegating_ledger_is_an_effect_ledger_but_not_prunable(tmp_path: Path):
    """Over a real SQLite ledger: it satisfies EffectLedger, and never offers pruning."""
    inner = open_ledger(str(tmp_path / "ledger.db"))
    wrapper = DelegatingLedger(inner)
    try:
        assert isinstance(inner, Prunable)
        assert isinstance(wrapper, EffectLedger)
        assert not isinstance(wrapper, Prunable)
    finally:
        wrapper.close()


def test_a_full_executor_call_through_a_delegating_ledger_on_sqlite(tmp_path: Path):
    """A lost ack settled by the probe, then a replay: one effect, the inner ledger holds it all."""
    inner = open_ledger(str(tmp_path / "ledger.db"))
    wrapper = DelegatingLedger(inner)
    provider = FakePaymentProvider(idempotency_guaranteed=False, faults=FaultPlan([Fault.LOSE_ACK]))
    executor = EffectExecutor(wrapper)
    try:
        first = executor.execute(capture_contract(provider), ARGS, provider.handler)
        again = EffectExecutor(wrapper).execute(capture_contract(provider), ARGS, provider.handler)

        assert first.status is EffectStatus.CONFIRMED
        assert again.status is EffectStatus.CONFIRMED
        assert again.replayed
        assert provider.committed() == 1
        record = inner.get(OPERATION)
        assert record is not None
        assert record.status is EffectStatus.CONFIRMED
        assert [e.type for e in wrapper.events(OPERATION)] == [
            e.type for e in inner.events(OPERATION)
        ]
        assert wrapper.verify().ok
    finally:
        wrapper.close()
