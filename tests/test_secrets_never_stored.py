"""A card number and a CVV in ``redact=`` appear nowhere, whatever user code echoes them in.

Realistic flows echo both values — in a handler's exception, an ``EffectRejected``,
an ``EffectNotSent``, a probe's exception and evidence, a late result, an
operator's reason — and then the test greps every place a value could land:
the ledger's bytes or rows, ``agent-effect-ops`` output, log records, observer
transitions and the exceptions the caller got.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from effectguard import (
    EffectExecutor,
    EffectNotSent,
    EffectQuarantined,
    EffectRejected,
    EffectStatus,
    OutcomeProbeResult,
    Transition,
    effect,
)
from effectguard.cli.ops import main as ops_main
from effectguard.testkit import FakePaymentProvider, ManualClock
from tests.support import wait_until

#: A card number passed as an ``int``, and a four-digit CVV (short: masked as a whole token).
CARD = 4000056655665556
CVV = "8163"
SPACED = "4000 0566 5566 5556"
SECRET = re.compile(rb"4000[ -]?0566[ -]?5566[ -]?5556|(?<![0-9A-Za-z])8163(?![0-9A-Za-z])")


def _leaks(text: str | bytes) -> list[str]:
    data = text.encode("utf-8", "replace") if isinstance(text, str) else text
    return [
        data[max(0, m.start() - 60) : m.end() + 20].decode("utf-8", "replace")
        for m in SECRET.finditer(data)
    ]


class Flows:
    """The decorated tools of every flow, sharing one ledger, provider and observer."""

    def __init__(self, ledger: Any) -> None:
        self.provider = FakePaymentProvider(idempotency_guaranteed=False)
        self.transitions: list[Transition] = []
        self.errors: list[BaseException] = []
        self.late = threading.Event()
        self.executor = EffectExecutor(
            ledger, clock=ManualClock(1_700_000_000.0), observers=[self.transitions.append]
        )
        self.not_sent_once: set[str] = set()

    def _commit(self, invoice_id: str, key: str) -> dict[str, Any]:
        return self.provider.capture(invoice_id, 1200, idempotency_key=key)

    def tool(self, name: str, **options: Any) -> Callable[..., Any]:
        """A decorator making an effect named ``name`` with both card fields redacted."""

        def decorate(handler: Callable[..., Any]) -> Callable[..., Any]:
            return effect(  # type: ignore[no-any-return]
                operation_id=f"{name}:{{invoice_id}}",
                idempotency_key=f"{name}:{{invoice_id}}",
                redact=("card_number", "cvv"),
                executor=self.executor,
                **options,
            )(handler)

        return decorate

    def run(self) -> None:  # noqa: C901 - one nested tool per flow reads best side by side
        """Run every flow once, keeping the exceptions the caller got."""
        flows = self

        def probe_raises(card_number: int, cvv: str, **_: Any) -> OutcomeProbeResult:
            msg = f"lookup failed for card {card_number} cvv {cvv}"
            raise RuntimeError(msg)

        @self.tool("raised", probe=probe_raises)
        def raised(invoice_id: str, card_number: int, cvv: str, *, idempotency_key: str) -> Any:
            flows._commit(invoice_id, idempotency_key)
            msg = f"gateway: card {card_number} (cvv {cvv}) declined after capture"
            raise RuntimeError(msg)

        @self.tool("rejected")
        async def rejected(
            invoice_id: str, card_number: int, cvv: str, *, idempotency_key: str
        ) -> Any:
            reason = f"card {card_number} declined: cvv={cvv} mismatch"
            raise EffectRejected(reason, evidence={"card": card_number, "cvv": cvv})

        def probe_evidence(idempotency_key: str, **_: Any) -> OutcomeProbeResult:
            found = flows.provider.find_capture(idempotency_key)
            return OutcomeProbeResult.committed(
                {**(found or {}), "card": SPACED}, evidence={"card": SPACED, "cvv": CVV}
            )

        @self.tool("probed", probe=probe_evidence)
        def probed(invoice_id: str, card_number: int, cvv: str, *, idempotency_key: str) -> Any:
            flows._commit(invoice_id, idempotency_key)
            msg = f"read timeout on card {card_number}"
            raise TimeoutError(msg)

        @self.tool("unsent")
        def unsent(invoice_id: str, card_number: int, cvv: str, *, idempotency_key: str) -> Any:
            if invoice_id not in flows.not_sent_once:
                flows.not_sent_once.add(invoice_id)
                msg = f"connection refused before sending card {card_number}/{cvv}"
                raise EffectNotSent(msg, evidence={"cvv": cvv})
            return {**flows._commit(invoice_id, idempotency_key), "echo": f"{card_number}"}

        @self.tool("late", timeout=0.05)
        def late(invoice_id: str, card_number: int, cvv: str, *, idempotency_key: str) -> Any:
            flows.late.wait(10)
            return {**flows._commit(invoice_id, idempotency_key), "card": card_number, "cvv": cvv}

        for call in (
            lambda: raised("INV-1", CARD, CVV),
            lambda: asyncio.run(rejected("INV-2", CARD, CVV)),
            lambda: probed("INV-3", CARD, CVV),
            lambda: unsent("INV-4", CARD, CVV),
            lambda: late("INV-5", CARD, CVV),
        ):
            try:
                call()
            except Exception as exc:
                self.errors.append(exc)
        self.late.set()
        ledger = self.executor.ledger
        wait_until(lambda: ledger.get("late:INV-5").status is EffectStatus.CONFIRMED)


@pytest.fixture
def flows(ledger: Any, caplog: pytest.LogCaptureFixture) -> Flows:
    """Every flow run on this backend's ledger, then an operator confirming the quarantined one."""
    caplog.set_level(logging.DEBUG)
    ran = Flows(ledger)
    try:
        ran.run()
    finally:
        ran.late.set()
    ledger.confirm(
        "raised:INV-1",
        output={"id": "cap_000001", "note": f"card {CARD} charged once"},
        provider_operation_id=f"cap_000001 card {CARD}",
        actor="ops",
        reason=f"customer confirmed card {SPACED} (cvv {CVV}) was charged once",
        evidence_reference=f"ticket 77 about {CARD}",
    )
    return ran


OPERATIONS = ("raised:INV-1", "rejected:INV-2", "probed:INV-3", "unsent:INV-4", "late:INV-5")


def test_the_flows_did_what_they_say(flows: Flows, ledger: Any) -> None:
    """The provider committed exactly the four captures, and each caller got what it should."""
    assert flows.provider.committed() == 4
    statuses = {op: ledger.get(op).status for op in OPERATIONS}
    assert statuses == {
        "raised:INV-1": EffectStatus.CONFIRMED,
        "rejected:INV-2": EffectStatus.REJECTED,
        "probed:INV-3": EffectStatus.CONFIRMED,
        "unsent:INV-4": EffectStatus.CONFIRMED,
        "late:INV-5": EffectStatus.CONFIRMED,
    }
    kinds = sorted(type(error).__name__ for error in flows.errors)
    assert kinds == ["EffectQuarantined", "EffectQuarantined", "EffectRejected"]
    assert any(isinstance(error, EffectQuarantined) for error in flows.errors)
    # The caller's own exception is chained unchanged: it is theirs, never stored.
    quarantined = next(e for e in flows.errors if isinstance(e, EffectQuarantined))
    assert str(CARD) in str(quarantined.__cause__)


def test_no_secret_in_the_ledgers_storage(
    flows: Flows, ledger: Any, backend: str, ledger_target: str
) -> None:
    """Neither the SQLite files (db, -wal, -shm) nor any PostgreSQL row holds either value."""
    if backend == "sqlite":
        found = {
            suffix: _leaks(Path(ledger_target + suffix).read_bytes())
            for suffix in ("", "-wal", "-shm")
            if Path(ledger_target + suffix).exists()
        }
    else:
        import psycopg  # noqa: PLC0415 - optional; imported only when a PostgreSQL server is given

        from effectguard.ledger.postgres import split_target  # noqa: PLC0415 - needs psycopg

        conninfo, schema = split_target(ledger_target, None)
        found = {}
        with psycopg.connect(conninfo, autocommit=True) as conn:
            tables = conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (schema,),
            ).fetchall()
            assert tables
            for (table,) in tables:
                rows = conn.execute(f'SELECT t::text FROM "{schema}"."{table}" t')  # noqa: S608 - names from the catalog.fetchall()
                found[table] = [leak for (row,) in rows for leak in _leaks(row)]
    assert {where: leaks for where, leaks in found.items() if leaks} == {}


def test_no_secret_in_ops_output(flows: Flows, ledger_target: str) -> None:
    """``agent-effect-ops`` list, show and events, as text and --json, never print either value."""
    runner = CliRunner()
    commands = [["list"], ["list", "--json"]]
    for op in OPERATIONS:
        commands += [["show", op], ["show", op, "--json"], ["events", op], ["events", op, "--json"]]
    leaks = {}
    for command in commands:
        result = runner.invoke(ops_main, ["--db", ledger_target, *command])
        assert result.exit_code == 0, result.output
        if _leaks(result.output):
            leaks[" ".join(command)] = _leaks(result.output)
    assert leaks == {}
    events = json.loads(
        runner.invoke(ops_main, ["--db", ledger_target, "events", "raised:INV-1", "--json"]).output
    )
    assert "[redacted]" in json.dumps(events)  # what was masked is visibly marked


def test_no_secret_in_ops_output_of_a_real_process(flows: Flows, ledger_target: str) -> None:
    """The same, once through a real ``agent-effect-ops`` process."""
    for op in OPERATIONS:
        done = subprocess.run(
            [sys.executable, "-m", "effectguard.cli.ops", "--db", ledger_target, "events", op],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert _leaks(done.stdout + done.stderr) == []


def test_no_secret_in_logs_transitions_or_errors(
    flows: Flows, caplog: pytest.LogCaptureFixture
) -> None:
    """Log records (every logger, DEBUG), observer transitions and the caller's errors are clean."""
    records = caplog.get_records("setup") + caplog.records  # the flows ran in the fixture
    assert flows.transitions
    assert records
    logged = [
        f"{record.name}: {record.getMessage()} {record.exc_text or ''} {vars(record)}"
        for record in records
    ]
    assert [leak for line in logged for leak in _leaks(line)] == []
    assert [leak for t in flows.transitions for leak in _leaks(repr(t))] == []
    said = [f"{type(e).__name__}: {e} {getattr(e, 'evidence', '')}" for e in flows.errors]
    assert [leak for line in said for leak in _leaks(line)] == []


def test_a_long_provider_id_does_not_switch_off_the_masking_of_the_reason(ledger: Any) -> None:
    """Too many tokens altogether to try every pairing: each text is still searched on its own."""
    from effectguard import EffectContract  # noqa: PLC0415 - only this test builds a contract
    from effectguard.testkit import Fault, FaultPlan, Lookup  # noqa: PLC0415 - only this test

    provider = FakePaymentProvider(
        idempotency_guaranteed=False, lookup=Lookup.NONE, faults=FaultPlan([Fault.LOSE_ACK])
    )
    contract = EffectContract(
        name="card.capture",
        operation_id=lambda a: f"long:{a['invoice_id']}",
        redact=frozenset({"card_number", "cvv"}),
    )
    arguments = {"invoice_id": "INV-8", "card_number": CARD, "cvv": CVV}
    result = EffectExecutor(ledger).execute(
        contract,
        arguments,
        lambda a, *, idempotency_key: provider.capture("INV-8", 1, idempotency_key="k"),
    )
    assert result.status is EffectStatus.QUARANTINED
    long_id = " ".join(f"seg{n}" for n in range(300))  # 300 tokens: 90,000 pairings

    ledger.confirm(
        "long:INV-8",
        output={"id": "cap_1"},
        provider_operation_id=long_id,
        actor="ops",
        reason=f"card {CARD} cvv {CVV} charged once",
        evidence_reference="T-1",
    )

    events = json.dumps([event.evidence for event in ledger.events("long:INV-8")])
    record = ledger.get("long:INV-8")
    assert _leaks(events + str(record.reason)) == []
    assert "[redacted]" in str(record.reason)
    assert provider.committed() == 1
