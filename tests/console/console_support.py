"""What the console tests share: quarantined payments and requests awaiting approval.

Each is made the way production makes it; the helpers at the end read what a
page's forms carry and snapshot a ledger to show a refused write left it untouched.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from effectguard import (
    INJECTED,
    EffectAwaitingApproval,
    EffectContract,
    EffectExecutor,
    EffectLedger,
    EffectStatus,
    OutcomeProbeResult,
    effect,
    open_ledger,
    use_executor,
)
from effectguard.runtime import (
    AgentRuntime,
    RunState,
    ScriptedModel,
    SQLiteCheckpointStore,
    ToolCall,
    ToolRegistry,
)
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan, Lookup

TOKEN = "t" * 8 + "-console-test-token-" + "x" * 8


def capture_contract(name: str = "capture") -> EffectContract:
    """A capture whose operation id is the invoice id as given, so ids can be anything."""
    return EffectContract(
        name=name,
        operation_id=lambda a: f"invoice:{a['invoice_id']}:capture",
        provider_idempotency_key=lambda a: f"capture:{a['invoice_id']}",
        redact=frozenset({"card_token"}),
    )


def quarantine(
    ledger: EffectLedger, invoice_id: str, *, contract: str = "capture"
) -> FakePaymentProvider:
    """Capture one invoice with a lost acknowledgement and no probe: it ends QUARANTINED.

    The returned provider committed the payment: exactly one, which no
    resolution may add to.
    """
    provider = FakePaymentProvider(
        idempotency_guaranteed=False, lookup=Lookup.NONE, faults=FaultPlan([Fault.LOSE_ACK])
    )
    arguments = {"invoice_id": invoice_id, "amount_cents": 1250, "card_token": "tok_secret"}
    result = EffectExecutor(ledger).execute(capture_contract(contract), arguments, provider.handler)
    if result.status is not EffectStatus.QUARANTINED:
        msg = f"expected QUARANTINED, got {result.status}"
        raise RuntimeError(msg)
    return provider


def operation_id(invoice_id: str) -> str:
    """The operation id :func:`quarantine` records for ``invoice_id``."""
    return f"invoice:{invoice_id}:capture"


def replay(ledger: EffectLedger, invoice_id: str, provider: FakePaymentProvider) -> Any:
    """Call the capture again, as the agent would after the operator acted."""
    arguments: Mapping[str, Any] = {
        "invoice_id": invoice_id,
        "amount_cents": 1250,
        "card_token": "tok_secret",
    }
    return EffectExecutor(ledger).execute(capture_contract(), arguments, provider.handler)


def sqlite_state(path: Path) -> tuple[str, list[Any]]:
    """The sha256 of a SQLite ledger file (and its WAL) and every row of every table."""
    digest = hashlib.sha256()
    for part in (path, path.with_name(path.name + "-wal")):
        if part.exists():
            digest.update(part.read_bytes())
    rows: list[Any] = []
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        tables = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        for (table,) in tables.fetchall():
            rows.append((table, conn.execute(f'SELECT * FROM "{table}"').fetchall()))  # noqa: S608 - table names come from the file's own schema
    return digest.hexdigest(), rows


RUN_ID = "pay-INV-7"
RUN_OPERATION = "invoice:INV-7:capture"


class Payments:
    """A capture tool with no probe and no idempotency guarantee: a lost ack quarantines it."""

    def __init__(self, provider: FakePaymentProvider) -> None:
        self.provider = provider

    @effect(
        operation_id="invoice:{invoice_id}:capture",
        idempotency_key="capture:{invoice_id}",
        name="payments.capture",
    )
    def capture_payment(
        self, invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED
    ) -> dict[str, Any]:
        """Capture the payment of an invoice.

        Args:
            invoice_id: The invoice to charge.
            amount_cents: The amount, in cents.
            idempotency_key: Supplied by the executor, the same for every attempt.
        """
        return self.provider.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)


def open_runtime(workdir: Path, provider: FakePaymentProvider) -> tuple[AgentRuntime, Any]:
    """A runtime over ``workdir``'s ledger and checkpoints that pays INV-7, then says it is done."""
    ledger = open_ledger(workdir / "ledger.db")
    checkpoints = SQLiteCheckpointStore(workdir / "runs.db")
    model = ScriptedModel(
        [
            ToolCall("call-1", "capture_payment", {"invoice_id": "INV-7", "amount_cents": 700}),
            "paid",
        ]
    )
    runtime = AgentRuntime(
        model,
        ToolRegistry.discover(Payments(provider)),
        EffectExecutor(ledger, deadline=0),
        checkpoints=checkpoints,
    )

    def close() -> None:
        checkpoints.close()
        ledger.close()

    return runtime, close


def waiting_run(workdir: Path) -> FakePaymentProvider:
    """Start a run whose capture commits but loses its ack: the run WAITS on RUN_OPERATION."""
    provider = FakePaymentProvider(
        path=workdir / "provider.db",
        idempotency_guaranteed=False,
        lookup=Lookup.NONE,
        faults=FaultPlan([Fault.LOSE_ACK]),
    )
    runtime, close = open_runtime(workdir, provider)
    try:
        result = runtime.start(RUN_ID, "Please pay INV-7.")
    finally:
        close()
    if result.state is not RunState.WAITING or provider.committed() != 1:
        msg = f"expected a WAITING run over one committed payment, got {result}"
        raise RuntimeError(msg)
    return provider


class ProbedPayments:
    """A capture whose probe can be switched off, as a provider's lookup API that is down."""

    def __init__(self, provider: FakePaymentProvider) -> None:
        self.provider = provider
        self.probe_down = True

    def find_capture(
        self, invoice_id: str, amount_cents: int, *, idempotency_key: str
    ) -> OutcomeProbeResult:
        """Ask the provider for the capture sent with this key."""
        del amount_cents  # the key identifies the request
        if self.probe_down:
            msg = "the provider's lookup API is down"
            raise ConnectionError(msg)
        return self.provider.probe({"invoice_id": invoice_id}, idempotency_key=idempotency_key)

    @effect(
        name="billing.capture",
        operation_id="invoice:{invoice_id}:capture",
        idempotency_key="capture:{invoice_id}",
        probe=find_capture,
        provider_operation_id="id",
    )
    def capture(
        self, invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED
    ) -> dict[str, Any]:
        """Capture the payment of an invoice.

        Args:
            invoice_id: The invoice to charge.
            amount_cents: The amount, in cents.
            idempotency_key: Supplied by the executor, the same for every attempt.
        """
        return self.provider.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)


def quarantined_with_probe(ledger: EffectLedger) -> ProbedPayments:
    """Capture INV-9, lose the ack while the lookup API is down: QUARANTINED, one payment."""
    tools = ProbedPayments(
        FakePaymentProvider(idempotency_guaranteed=False, faults=FaultPlan([Fault.LOSE_ACK]))
    )
    with use_executor(EffectExecutor(ledger, deadline=0)):
        result = tools.capture.execute("INV-9", 900)
    if result.status is not EffectStatus.QUARANTINED:
        msg = f"expected QUARANTINED, got {result.status}"
        raise RuntimeError(msg)
    return tools


class ApprovedCaptures:
    """A capture a person must approve first, over one fake provider that counts what it sends.

    The card token is redacted: it is never stored, so the console can only
    show it masked.
    """

    def __init__(self, provider: FakePaymentProvider | None = None) -> None:
        self.provider = provider or FakePaymentProvider(idempotency_guaranteed=False)

    @effect(
        name="payments.approved_capture",
        operation_id="invoice:{invoice_id}:approved-capture",
        idempotency_key="approved-capture:{invoice_id}",
        redact=("card_token",),
        requires_approval=True,
    )
    def capture(
        self,
        invoice_id: str,
        amount_cents: int,
        card_token: str,
        *,
        idempotency_key: str = INJECTED,
    ) -> dict[str, Any]:
        """Capture the payment of an invoice once a person has approved exactly this request.

        Args:
            invoice_id: The invoice to charge.
            amount_cents: The amount, in cents.
            card_token: The card to charge (never stored).
            idempotency_key: Supplied by the executor, the same for every attempt.
        """
        del card_token  # the fake provider charges by invoice
        return self.provider.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)

    def call(self, ledger: EffectLedger, invoice_id: str, amount_cents: int = 4200) -> Any:
        """Make the capture of ``invoice_id`` as the agent does, over ``ledger``."""
        with use_executor(EffectExecutor(ledger, deadline=0)):
            return self.capture(invoice_id, amount_cents, "tok_secret")


def approval_operation(invoice_id: str) -> str:
    """The operation id :class:`ApprovedCaptures` records for ``invoice_id``."""
    return f"invoice:{invoice_id}:approved-capture"


def awaiting_approval(
    ledger: EffectLedger, invoice_id: str, captures: ApprovedCaptures | None = None
) -> ApprovedCaptures:
    """Ask for the capture of ``invoice_id``: recorded AWAITING_APPROVAL, nothing sent."""
    captures = captures or ApprovedCaptures()
    sent_before = captures.provider.committed()
    try:
        captures.call(ledger, invoice_id)
    except EffectAwaitingApproval:
        pass
    else:
        msg = "the capture was sent without an approval"
        raise RuntimeError(msg)
    if captures.provider.committed() != sent_before:
        msg = "asking for an approval sent something"
        raise RuntimeError(msg)
    return captures


CSRF_FIELD = re.compile(r'name="csrf" value="([0-9a-f]{64})"')
SEEN_FIELD = re.compile(r'name="(expect_events|expect_head)" value="([0-9a-f]+)"')


def page_csrf(client: Any, op: str) -> str:
    """The CSRF token the operation page's forms carry (``client`` is a logged-in TestClient)."""
    page = client.get("/operation", params={"id": op})
    assert page.status_code == 200, page.text
    found = CSRF_FIELD.search(page.text)
    assert found is not None, "the operation page has no resolution form"
    return found.group(1)


def page_seen(client: Any, op: str) -> dict[str, str]:
    """The state the operation page shows, as its resolution form carries it."""
    page = client.get("/operation", params={"id": op})
    assert page.status_code == 200, page.text
    found = dict(SEEN_FIELD.findall(page.text))
    assert set(found) == {"expect_events", "expect_head"}, "the form carries no state"
    return found


def ledger_snapshot(ledger: EffectLedger, backend: str, target: str) -> Any:
    """Every record with its events, and on SQLite the file's bytes too: equal means untouched."""
    records = [(r, ledger.events(r.operation_id)) for r in ledger.list_operations(limit=1000)]
    return records, sqlite_state(Path(target)) if backend == "sqlite" else None
