"""Tools for ``agent-effect check``'s tests, each over a FakePaymentProvider that counts captures.

``PROVIDERS`` is replaced before each test (see ``reset``), so each test
counts only its own captures. With ``EFFECTGUARD_CHECK_TOOLS_DIR`` set the
providers live in SQLite files there, so that the checker's child processes
(which import this module afresh) commit to the providers this process counts;
without it they live in memory, in each process apart.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from effectguard import OutcomeProbeResult, effect
from effectguard.testkit import FakePaymentProvider, Lookup

PROVIDERS: dict[str, FakePaymentProvider] = {}


def reset() -> dict[str, FakePaymentProvider]:
    """Fresh providers: honest (deduplicates, strong lookup) and no-dedup (every send commits)."""
    for provider in PROVIDERS.values():
        provider.close()
    PROVIDERS.clear()
    shared = os.environ.get("EFFECTGUARD_CHECK_TOOLS_DIR")
    for name, guaranteed in (("honest", True), ("no_dedup", False)):
        path = None if shared is None else Path(shared) / f"{name}.db"
        PROVIDERS[name] = FakePaymentProvider(
            idempotency_guaranteed=guaranteed, lookup=Lookup.STRONG, path=path
        )
    return PROVIDERS


reset()


def _probe(name: str, invoice_id: str, idempotency_key: str | None) -> OutcomeProbeResult:
    return PROVIDERS[name].probe({"invoice_id": invoice_id}, idempotency_key=idempotency_key)


@effect(
    operation_id="invoice:{invoice_id}:capture:{amount_cents}",
    idempotency_key="capture:{invoice_id}:{amount_cents}",
    idempotency_guaranteed=True,
    probe=lambda invoice_id, amount_cents, idempotency_key: _probe(
        "honest", invoice_id, idempotency_key
    ),
)
def honest_capture(invoice_id: str, amount_cents: int, idempotency_key: str) -> dict[str, Any]:
    """A capture whose contract tells the truth: deduplicating keys, a read-your-writes probe."""
    return PROVIDERS["honest"].capture(invoice_id, amount_cents, idempotency_key=idempotency_key)


def count_honest(operation_id: str, idempotency_key: str | None) -> int:
    """Captures the honest provider committed under ``idempotency_key``."""
    return PROVIDERS["honest"].committed(idempotency_key)


@effect(
    operation_id="invoice:{invoice_id}:capture:{amount_cents}",
    idempotency_key="capture:{invoice_id}:{amount_cents}",
    probe=lambda invoice_id, amount_cents, idempotency_key: OutcomeProbeResult.not_committed(
        {"lookup": "always says not found"}
    ),
)
def lying_probe_capture(invoice_id: str, amount_cents: int, idempotency_key: str) -> dict[str, Any]:
    """A capture at a provider without dedup whose probe answers NOT_COMMITTED, always."""
    return PROVIDERS["no_dedup"].capture(invoice_id, amount_cents, idempotency_key=idempotency_key)


@effect(
    operation_id="invoice:{invoice_id}:capture:{amount_cents}",
    idempotency_key="capture:{invoice_id}:{amount_cents}",
    idempotency_guaranteed=True,
    probe=lambda invoice_id, amount_cents, idempotency_key: _probe(
        "no_dedup", invoice_id, idempotency_key
    ),
)
def false_idempotency_capture(
    invoice_id: str, amount_cents: int, idempotency_key: str
) -> dict[str, Any]:
    """A capture claiming idempotency_guaranteed at a provider that commits every resend."""
    return PROVIDERS["no_dedup"].capture(invoice_id, amount_cents, idempotency_key=idempotency_key)


def count_no_dedup(operation_id: str, idempotency_key: str | None) -> int:
    """Captures the deduplication-free provider committed under ``idempotency_key``."""
    return PROVIDERS["no_dedup"].committed(idempotency_key)


@effect(
    operation_id="invoice:{invoice_id}:capture",
    idempotency_key="capture:{invoice_id}:{amount_cents}",
    idempotency_guaranteed=True,
    probe=lambda invoice_id, amount_cents, idempotency_key: _probe(
        "honest", invoice_id, idempotency_key
    ),
)
def colliding_capture(invoice_id: str, amount_cents: int, idempotency_key: str) -> dict[str, Any]:
    """A capture whose operation id leaves out the amount: two amounts share one id."""
    return PROVIDERS["honest"].capture(invoice_id, amount_cents, idempotency_key=idempotency_key)


@effect(operation_id="invoice:{invoice_id}:capture")
def no_probe_capture(invoice_id: str, amount_cents: int) -> dict[str, Any]:
    """A capture without a probe: nothing could settle its uncertain outcome."""
    return PROVIDERS["honest"].capture(invoice_id, amount_cents)


def plain_function(invoice_id: str) -> None:
    """Not an @effect tool."""


def raising_counter(operation_id: str, idempotency_key: str | None) -> int:
    """A counter that cannot count."""
    raise RuntimeError("sandbox is down")


NOT_CALLABLE = 3


@effect(operation_id="capture:{invoice_id}", probe=lambda invoice_id, blob: None)
def unannotated_capture(invoice_id: str, blob: object) -> None:
    """A tool with an argument the checker cannot draw (no simple annotation, no default)."""


def counter_failing_later(operation_id: str, idempotency_key: str | None) -> int:
    """A counter that answers the checker's up-front question, then fails on real operations."""
    if operation_id == "effectguard-check-never-sent":
        return 0
    raise ConnectionError("sandbox went away")


class _LoopBoundClient:
    """An async client bound to the event loop it first ran on, as HTTP clients are.

    Used from another loop it raises, so a checker that gave each call a loop
    of its own would fail the async tools below.
    """

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None

    async def send(self, name: str, invoice_id: str, amount_cents: int, key: str) -> dict[str, Any]:
        self._check_loop()
        await asyncio.sleep(0)
        return PROVIDERS[name].capture(invoice_id, amount_cents, idempotency_key=key)

    async def probe(self, name: str, invoice_id: str, key: str | None) -> OutcomeProbeResult:
        self._check_loop()
        await asyncio.sleep(0)
        return _probe(name, invoice_id, key)

    def _check_loop(self) -> None:
        running = asyncio.get_running_loop()
        if self.loop is None:
            self.loop = running
        elif self.loop is not running:
            raise RuntimeError("client used from another event loop than the one it was made on")


CLIENT = _LoopBoundClient()


async def _honest_probe(
    invoice_id: str, amount_cents: int, idempotency_key: str | None
) -> OutcomeProbeResult:
    return await CLIENT.probe("honest", invoice_id, idempotency_key)


@effect(
    operation_id="invoice:{invoice_id}:capture:{amount_cents}",
    idempotency_key="capture:{invoice_id}:{amount_cents}",
    idempotency_guaranteed=True,
    probe=_honest_probe,
)
async def async_honest_capture(
    invoice_id: str, amount_cents: int, idempotency_key: str
) -> dict[str, Any]:
    """``honest_capture`` as an async tool with an async probe, through one loop-bound client."""
    return await CLIENT.send("honest", invoice_id, amount_cents, idempotency_key)


async def async_count_honest(operation_id: str, idempotency_key: str | None) -> int:
    """``count_honest`` as a coroutine."""
    await asyncio.sleep(0)
    return PROVIDERS["honest"].committed(idempotency_key)


async def _lying_probe(
    invoice_id: str, amount_cents: int, idempotency_key: str | None
) -> OutcomeProbeResult:
    await asyncio.sleep(0)
    return OutcomeProbeResult.not_committed({"lookup": "always says not found"})


@effect(
    operation_id="invoice:{invoice_id}:capture:{amount_cents}",
    idempotency_key="capture:{invoice_id}:{amount_cents}",
    probe=_lying_probe,
)
async def async_lying_probe_capture(
    invoice_id: str, amount_cents: int, idempotency_key: str
) -> dict[str, Any]:
    """``lying_probe_capture`` as an async tool with an async probe."""
    return await CLIENT.send("no_dedup", invoice_id, amount_cents, idempotency_key)


@effect(
    operation_id="capture:{run_id}:{call_id}",
    idempotency_key="capture:{run_id}:{call_id}",
    idempotency_guaranteed=True,
    probe=lambda invoice_id, amount_cents, idempotency_key: _probe(
        "honest", invoice_id, idempotency_key
    ),
)
def scoped_capture(invoice_id: str, amount_cents: int, idempotency_key: str) -> dict[str, Any]:
    """A capture identified by the framework's tool call (its run id and call id), honestly."""
    return PROVIDERS["honest"].capture(invoice_id, amount_cents, idempotency_key=idempotency_key)


@effect(
    operation_id="capture:{run_id}:{invoice_id}",
    idempotency_key="capture:{run_id}:{invoice_id}",
    idempotency_guaranteed=True,
    probe=lambda invoice_id, amount_cents, idempotency_key: _probe(
        "honest", invoice_id, idempotency_key
    ),
)
def run_scoped_capture(invoice_id: str, amount_cents: int, idempotency_key: str) -> dict[str, Any]:
    """One capture per invoice and run: two calls with other amounts in one run share an id."""
    return PROVIDERS["honest"].capture(invoice_id, amount_cents, idempotency_key=idempotency_key)


@effect(
    operation_id="capture:{run_id}:{call_id}",
    idempotency_key="capture:{run_id}:{call_id}",
    idempotency_guaranteed=True,
    probe=_honest_probe,
)
async def async_scoped_capture(
    invoice_id: str, amount_cents: int, idempotency_key: str
) -> dict[str, Any]:
    """``scoped_capture`` as an async tool: its scope must reach the checker's event loop."""
    return await CLIENT.send("honest", invoice_id, amount_cents, idempotency_key)


def _broken_operation_id(arguments: Any) -> str:
    return str(arguments["invoice_id"]) + arguments["amount_cents"]  # str + int: TypeError


@effect(operation_id=_broken_operation_id, probe=lambda invoice_id, amount_cents: None)
def broken_id_capture(invoice_id: str, amount_cents: int) -> None:
    """A tool whose own operation id callable fails on every request."""
