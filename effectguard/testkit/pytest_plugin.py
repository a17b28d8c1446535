"""pytest fixtures for testing your own effects under faults.

Installed with effectguard and loaded automatically (``pytest11`` entry point
``effectguard``); disable with ``-p no:effectguard``. Fixtures:

- ``effect_clock``: a :class:`ManualClock` the ledger and executor read;
  ``effect_clock.advance(seconds)`` expires leases without sleeping.
- ``effect_ledger``: a fresh SQLite ledger in ``tmp_path``, closed afterwards.
- ``effect_executor``: an :class:`EffectExecutor` on that ledger and clock.
- ``fault_plan``: the :class:`FaultPlan` both fakes follow; plan faults with
  ``fault_plan.set(attempt, Fault.LOSE_ACK)``.
- ``fake_payments`` / ``fake_email``: a :class:`FakePaymentProvider` (guaranteed
  keys, strong lookup) and a :class:`FakeEmailProvider` (no idempotency, lookup
  by Message-ID), both following ``fault_plan``.
- ``assert_committed_once(provider, key)``: fails unless the provider committed
  exactly one effect under ``key`` (an idempotency key or Message-ID).
- ``effect_check(tool, counter)``: plays ``agent-effect check``'s episodes
  against your own ``@effect`` tool and fails the test with the receipt's
  table when an episode or a claim of its contract does not hold; returns the
  :class:`~effectguard.testkit.checker.CheckReport` otherwise.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

import pytest

# Installed with the package, this plugin is loaded into every pytest run of everyone
# who installed effectguard: it imports the executor, the ledger and the fakes only
# when a test asks for one of its fixtures.
if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from effectguard._executor._machine import EffectExecutor
    from effectguard.ledger.sqlite import SQLiteEffectLedger
    from effectguard.testkit.checker import CheckReport
    from effectguard.testkit.clock import ManualClock
    from effectguard.testkit.fakes.base import FakeProvider
    from effectguard.testkit.fakes.mail import FakeEmailProvider
    from effectguard.testkit.fakes.payments import FakePaymentProvider
    from effectguard.testkit.faults import FaultPlan

__all__ = [
    "assert_committed_once",
    "effect_check",
    "effect_clock",
    "effect_executor",
    "effect_ledger",
    "fake_email",
    "fake_payments",
    "fault_plan",
]

#: How long a LATE_COMMIT fault holds a request that the test never releases.
_LATE_COMMIT_AFTER = 30.0


@pytest.fixture
def effect_clock() -> ManualClock:
    """A clock that moves only when the test calls ``advance``; the ledger and executor read it."""
    from effectguard.testkit.clock import ManualClock  # noqa: PLC0415 - loaded on use

    return ManualClock()


@pytest.fixture
def effect_ledger(tmp_path: Path, effect_clock: ManualClock) -> Iterator[SQLiteEffectLedger]:
    """A fresh SQLite ledger in this test's ``tmp_path``."""
    from effectguard.ledger.sqlite import SQLiteEffectLedger  # noqa: PLC0415 - loaded on use

    ledger = SQLiteEffectLedger(tmp_path / "effectguard-ledger.db", clock=effect_clock)
    yield ledger
    ledger.close()


@pytest.fixture
def effect_executor(effect_ledger: SQLiteEffectLedger, effect_clock: ManualClock) -> EffectExecutor:
    """An executor recording into ``effect_ledger`` and reading ``effect_clock``."""
    from effectguard._executor._machine import EffectExecutor  # noqa: PLC0415 - loaded on use

    return EffectExecutor(effect_ledger, clock=effect_clock)


@pytest.fixture
def fault_plan() -> FaultPlan:
    """The fault plan ``fake_payments`` and ``fake_email`` follow (empty: no faults)."""
    from effectguard.testkit.faults import FaultPlan  # noqa: PLC0415 - loaded on use

    return FaultPlan()


@pytest.fixture
def fake_payments(fault_plan: FaultPlan) -> Iterator[FakePaymentProvider]:
    """A payment provider with guaranteed idempotency keys and a read-your-writes lookup."""
    from effectguard.testkit.fakes.payments import FakePaymentProvider  # noqa: PLC0415 - loaded on use

    provider = FakePaymentProvider(faults=fault_plan, late_commit_after=_LATE_COMMIT_AFTER)
    yield provider
    provider.release_late()  # never leave a handler thread parked after the test
    provider.close()


@pytest.fixture
def fake_email(fault_plan: FaultPlan) -> Iterator[FakeEmailProvider]:
    """An email provider with no idempotency whose sent log is searchable by Message-ID."""
    from effectguard.testkit.fakes.mail import FakeEmailProvider  # noqa: PLC0415 - loaded on use

    provider = FakeEmailProvider(faults=fault_plan, late_commit_after=_LATE_COMMIT_AFTER)
    yield provider
    provider.release_late()
    provider.close()


def _assert_committed_once(provider: FakeProvider, key: str) -> None:
    __tracebackhide__ = True
    count = provider.committed(key)
    if count != 1:
        effects = provider.effects()
        msg = (
            f"expected exactly one committed effect under {key!r}, the provider holds {count} "
            f"(of {len(effects)} committed in all: {effects!r})"
        )
        raise AssertionError(msg)


@pytest.fixture
def assert_committed_once() -> Callable[[FakeProvider, str], None]:
    """``assert_committed_once(provider, key)``: exactly one effect committed under ``key``."""
    return _assert_committed_once


class EffectCheck(Protocol):
    """The ``effect_check`` fixture's callable (see :func:`effect_check`)."""

    def __call__(
        self,
        tool: object,
        counter: Callable[[str, str | None], int] | None = None,
        *,
        episodes: int = ...,
        processes: int = ...,
        seed: int = ...,
        same_request: Sequence[str] = ...,
    ) -> CheckReport: ...


def _effect_check(
    tool: object,
    counter: Callable[[str, str | None], int] | None = None,
    *,
    episodes: int | None = None,
    processes: int | None = None,
    seed: int = 0,
    same_request: Sequence[str] = (),
) -> CheckReport:
    __tracebackhide__ = True
    from effectguard.testkit import checker  # noqa: PLC0415 - loaded on use

    counter_spec = None
    if counter is not None:
        counter_spec = f"{counter.__module__}:{getattr(counter, '__qualname__', counter)}"
    try:
        subject = checker.subject_of(
            tool, counter, counter_spec=counter_spec, same_request=same_request
        )
    except checker.CheckInputError as exc:
        refused = f"effect_check: {exc}"
    else:
        refused = ""
    if refused:
        pytest.fail(refused, pytrace=False)
    report = checker.run_check(
        subject,
        episodes=len(checker.EPISODE_KINDS) if episodes is None else episodes,
        processes=len(checker.PROCESS_KINDS) if processes is None else processes,
        seed=seed,
    )
    if not report.held:
        lines = [report.summary(), *report.table(), f"reproduce: {report.command}"]
        pytest.fail("\n".join(lines), pytrace=False)
    return report


@pytest.fixture
def effect_check() -> EffectCheck:
    """``effect_check(tool, counter=None, *, episodes, processes, seed, same_request)``.

    Plays the episodes of ``agent-effect check`` against ``tool`` (your
    ``@effect`` function, with its probe), counting effects with ``counter(
    operation_id, idempotency_key)``: in this process a lost acknowledgement,
    a failure before the send, a handler timeout, the ledger unavailable at
    the claim and at the outcome; in child processes a SIGKILL before and
    after the send and two racing callers (the children import ``tool`` by its
    module, so it must be importable by name, and its provider reachable from
    another process). Fails the test with the receipt's table on a duplicate,
    a lost confirmation or a broken claim; returns the report otherwise.
    """
    return typing.cast("EffectCheck", _effect_check)
