"""Group commit: a caller interrupted after it took the writer's role never strands the others.

A ``KeyboardInterrupt`` can land on any bytecode of the main thread, also
between taking the writer's role (or being handed it) and starting to lead.
Before the fix the role stayed taken by nobody, and every later write of
that ledger in the process (a REPL, a notebook kernel) waited forever. The
interrupt is injected deterministically with a line trace on that line.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from effectguard import EffectContract, EffectExecutor, EffectStatus, SQLiteEffectLedger
from effectguard.ledger.sqlite import GroupCommit
from effectguard.testkit import FakePaymentProvider

CONTRACT = EffectContract(name="group.capture", operation_id=lambda a: f"cap:{a['invoice_id']}")


def _line_of(function: Any, text: str) -> int:
    lines, first = inspect.getsourcelines(function)
    return first + next(i for i, line in enumerate(lines) if line.strip() == text)


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[SQLiteEffectLedger]:
    opened = SQLiteEffectLedger(tmp_path / "ledger.db", busy_timeout=0.5)
    yield opened
    opened.close()


@pytest.mark.parametrize(
    ("function", "line", "write"),
    [
        # A guarded call's claim is a standalone write: it takes the role for itself.
        pytest.param(GroupCommit.run, "if alone:", "call", id="standalone"),
        # A write that joins a batch (anchor_head fills the anchor in) takes the role to lead.
        pytest.param(GroupCommit._queued, "if pending.lead:", "batch", id="batch"),
    ],
)
def test_an_interrupt_before_leading_passes_the_writer_role_on(
    ledger: SQLiteEffectLedger, tmp_path: Path, function: Any, line: str, write: str
) -> None:
    """Ctrl-C right after taking the role: the call fails, nothing is sent, the next call works."""
    provider = FakePaymentProvider(path=tmp_path / "provider.db")
    executor = EffectExecutor(ledger)

    def capture(arguments: dict[str, Any], *, idempotency_key: str) -> dict[str, Any]:
        return provider.capture(arguments["invoice_id"], 100, idempotency_key=idempotency_key)

    if write == "batch":
        executor.execute(CONTRACT, {"invoice_id": "INV-0"}, capture)
    code = function.__code__
    target = _line_of(function, line)
    fired: list[int] = []

    def local(frame: FrameType, event: str, _arg: object) -> Any:
        if event == "line" and frame.f_lineno == target and not fired:
            fired.append(frame.f_lineno)
            raise KeyboardInterrupt
        return local

    def tracer(frame: FrameType, _event: str, _arg: object) -> Any:
        return local if frame.f_code is code else None

    interrupted = (
        ledger.anchor_head
        if write == "batch"
        else lambda: executor.execute(CONTRACT, {"invoice_id": "INV-1"}, capture)
    )
    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        with pytest.raises(KeyboardInterrupt):
            interrupted()
    finally:
        sys.settrace(previous)
    assert fired == [target]
    before = provider.committed()
    assert before == (1 if write == "batch" else 0)
    # Nobody holds the writer's role now: without this, the call below would wait forever.
    assert ledger._group._leading is False
    result = executor.execute(CONTRACT, {"invoice_id": "INV-1"}, capture)
    assert result.status is EffectStatus.CONFIRMED
    assert provider.committed() == before + 1
