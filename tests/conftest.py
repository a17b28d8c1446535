"""Shared fixtures: every ledger test runs against each backend through ``make_ledger``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from effectguard.ledger import EffectLedger, open_ledger

#: Backends every conformance test runs against.
BACKENDS = ["sqlite"]


class FakeClock:
    """A clock tests move by hand, so lease and deadline tests never sleep."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        """Return the current fake time in epoch seconds."""
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the fake time forward."""
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    """A hand-moved clock starting at a fixed instant."""
    return FakeClock()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The name of the ledger backend under test."""
    return str(request.param)


@pytest.fixture
def ledger_target(backend: str, tmp_path: Path) -> str:
    """What ``open_ledger`` takes to open this test's own, empty ledger."""
    if backend == "sqlite":
        return str(tmp_path / "ledger.db")
    raise AssertionError(backend)


@pytest.fixture
def make_ledger(ledger_target: str) -> Iterator[Callable[..., EffectLedger]]:
    """Open (another handle on) this test's ledger; every handle is closed afterwards."""
    opened: list[EffectLedger] = []

    def make(**options: Any) -> EffectLedger:
        ledger = open_ledger(ledger_target, **options)
        opened.append(ledger)
        return ledger

    yield make
    for ledger in opened:
        ledger.close()


@pytest.fixture
def ledger(make_ledger: Callable[..., EffectLedger]) -> EffectLedger:
    """This test's ledger, on the backend under test."""
    return make_ledger()
