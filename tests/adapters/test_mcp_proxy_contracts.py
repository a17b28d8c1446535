"""The proxy's contracts file and its guarded calls, in process: fast checks of each rule.

The upstream here is an ``MCPServer`` in this process, reached through the
SDK's in-process client; its payments are counted at the testkit's fake.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from extras_support import import_extra

from effectguard import EffectExecutor, EffectStatus, ProbeStatus, open_ledger
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan, Lookup

mcp = import_extra("mcp", "mcp")

from mcp import Client  # noqa: E402 - after the extra's check
from mcp.server.mcpserver import MCPServer  # noqa: E402 - after the extra's check
from mcp.server.mcpserver.exceptions import ToolError  # noqa: E402 - after the extra's check

from effectguard.adapters.mcp_proxy import (  # noqa: E402 - imports mcp, after the extra's check
    PENDING_META_KEY,
    ContractsError,
    GuardingProxy,
    check_contracts,
    load_contracts,
)

LOOKUP = {
    ProbeStatus.COMMITTED: "ok",
    ProbeStatus.NOT_COMMITTED: "missing",
    ProbeStatus.PENDING: "processing",
    ProbeStatus.UNKNOWN: "unknown",
}
CHARGE = {"card_number": "4242424242424242", "invoice_id": "INV-7", "amount_cents": 500}


def upstream(provider: FakePaymentProvider, *, refuse: bool = False) -> MCPServer:
    server = MCPServer("cards")

    @server.tool()
    def charge_card(
        card_number: str, invoice_id: str, amount_cents: int, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Charge a card."""
        if refuse:
            msg = "card declined"
            raise ToolError(msg)
        return provider.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)

    @server.tool()
    def find_charge(reference: str, verbose: bool = False) -> dict[str, Any]:
        """Look a charge up."""
        found = provider.probe({}, idempotency_key=reference)
        return {"status": LOOKUP[found.status], "charge": found.output}

    @server.tool()
    def find_card_charge(card_number: str, invoice_id: str) -> dict[str, Any]:
        """Look a charge up by card and invoice."""
        found = provider.find_capture(f"charge:{invoice_id}") if card_number else None
        return {"status": "missing"} if found is None else {"status": "ok", "charge": found}

    return server


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "contracts.toml"
    path.write_text(text, encoding="utf-8")
    return path


async def listed(server: MCPServer) -> list[Any]:
    async with Client(server) as client:
        return list((await client.list_tools()).tools)


def problems(tmp_path: Path, text: str) -> list[str]:
    """Every problem of ``text`` as a contracts file for the cards upstream."""
    path = write(tmp_path, text)
    try:
        contracts = load_contracts(path)
    except ContractsError as exc:
        return list(exc.problems)
    tools = asyncio.run(listed(upstream(FakePaymentProvider())))
    return check_contracts(path, contracts, tools)


GOOD = """
[tools.charge_card]
operation_id = "charge:{invoice_id}"
idempotency_key_argument = "idempotency_key"
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "no [tools.NAME] table"),
        ("title = 1\n" + GOOD, "(top level).title: unknown key"),
        (GOOD + "idempotency_guaranteed = 'yes'\n", "must be true or false"),
        (GOOD + "timeout = -1\n", "timeout: must be a positive number"),
        (GOOD + "upstream_error = 'ignore'\n", 'must be "unknown" or "rejected"'),
        (GOOD + "requires_approval = 'yes'\n", "requires_approval: must be true or false"),
        (
            '[tools.charge_card]\noperation_id = "c:{invoice_id}"\nidempotency_guaranteed = true\n',
            "needs idempotency_key_argument",
        ),
        (GOOD.replace("{invoice_id}", "{invoice.id}"), "only plain argument names"),
        (GOOD.replace("{invoice_id}", "{invoice_id"), "is not a str.format template"),
        (GOOD.replace("{invoice_id}", "{}"), "only plain argument names"),
        (
            GOOD.replace("{invoice_id}", "{idempotency_key}"),
            "names {idempotency_key}, which charge_card does not require",
        ),
        (GOOD.replace('"idempotency_key"', '"key"'), "charge_card takes no argument 'key'"),
        (GOOD + "redact = ['cvv']\n", "charge_card takes no argument 'cvv'"),
        (
            GOOD + '[tools.charge_card.probe]\ntool = "find_charge"\nfield = "status"\n'
            'committed = ["ok"]\narguments = { ref = "{idempotency_key}" }\n',
            "find_charge takes no argument 'ref'",
        ),
        (
            GOOD + '[tools.charge_card.probe]\ntool = "find_charge"\nfield = "status"\n'
            'committed = ["ok"]\nretry = true\n',
            "probe.retry: unknown key",
        ),
        (
            GOOD + '[tools.charge_card.probe]\ntool = "find_charge"\nfield = "status"\n',
            "probe.committed: must be a non-empty list",
        ),
    ],
)
def test_each_mistake_is_one_line_naming_its_key(tmp_path, text, expected):
    """A mistake in the file is exactly one problem, which names the file, the key and the fix."""
    found = problems(tmp_path, text)
    assert len(found) == 1, found
    assert expected in found[0]
    assert found[0].startswith(str(tmp_path / "contracts.toml"))


def test_a_good_file_has_no_problems(tmp_path):
    """The checks can pass: a file that fits the upstream has none."""
    probe = (
        '[tools.charge_card.probe]\ntool = "find_charge"\nfield = "status"\ncommitted = ["ok"]\n'
        'not_found = ["missing"]\narguments = { reference = "{idempotency_key}", verbose = "{}" }\n'
    )
    assert problems(tmp_path, GOOD) == []
    assert "only plain argument names" in problems(tmp_path, GOOD + probe)[0]
    assert problems(tmp_path, GOOD + probe.replace(', verbose = "{}"', "")) == []


def guarded_calls(
    tmp_path: Path, contracts: str, provider: FakePaymentProvider, *calls: dict[str, Any], **kw: Any
) -> tuple[list[Any], Any]:
    """Run ``calls`` of charge_card through a proxy over an in-process upstream."""
    path = write(tmp_path, contracts)
    server = upstream(provider, **kw)
    ledger = open_ledger(str(tmp_path / "ledger.db"))

    async def run() -> list[Any]:
        async with Client(server) as client:
            tools = list((await client.list_tools()).tools)
            contract = load_contracts(path)
            assert check_contracts(path, contract, tools) == []
            proxy = GuardingProxy(client, tools, contract, EffectExecutor(ledger))
            return [
                await proxy.call_tool("charge_card", call, str(n)) for n, call in enumerate(calls)
            ]

    return asyncio.run(run()), ledger


def test_a_redacted_argument_reaches_the_upstream_but_never_the_ledger(tmp_path):
    """Redact keeps the card number out of the ledger; the upstream still gets it in full."""
    provider = FakePaymentProvider(lookup=Lookup.STRONG)
    (result,), ledger = guarded_calls(
        tmp_path, GOOD + "redact = ['card_number']\n", provider, CHARGE
    )
    assert not result.is_error
    record = ledger.get("charge:INV-7")
    assert record is not None
    assert record.status is EffectStatus.CONFIRMED
    stored = json.dumps(
        [record.arguments, [event.evidence for event in ledger.events("charge:INV-7")]]
    )
    assert CHARGE["card_number"] not in stored
    assert (tmp_path / "ledger.db").read_bytes().find(CHARGE["card_number"].encode()) == -1
    assert provider.committed() == 1
    assert provider.effects()[0]["request"]["invoice_id"] == "INV-7"
    ledger.close()


def test_an_upstream_error_declared_a_rejection_is_final(tmp_path):
    """upstream_error = "rejected": the declined charge is REJECTED and never sent again."""
    provider = FakePaymentProvider()
    results, ledger = guarded_calls(
        tmp_path, GOOD + 'upstream_error = "rejected"\n', provider, CHARGE, CHARGE, refuse=True
    )
    for result in results:
        assert result.is_error
        assert "card declined" in result.content[0].text
        assert "never sent again" in result.content[0].text
    record = ledger.get("charge:INV-7")
    assert record is not None
    assert record.status is EffectStatus.REJECTED
    assert record.attempts == 1
    ledger.close()


def test_an_upstream_error_is_an_unknown_outcome_by_default(tmp_path):
    """An error answer is no proof of no effect: without a probe or a guarantee, QUARANTINED."""
    provider = FakePaymentProvider()
    (result,), ledger = guarded_calls(tmp_path, GOOD, provider, CHARGE, refuse=True)
    assert result.is_error
    assert result.meta["io.effectguard/effect"]["status"] == "QUARANTINED"
    ledger.close()


def test_a_probe_argument_made_from_a_redacted_one_is_masked_in_the_evidence(tmp_path):
    """A lost answer settled by a lookup by card: confirmed, and no card number in the ledger."""
    provider = FakePaymentProvider(lookup=Lookup.STRONG, faults=FaultPlan([Fault.LOSE_ACK]))
    contracts = GOOD + (
        "redact = ['card_number']\n[tools.charge_card.probe]\ntool = 'find_card_charge'\n"
        "arguments = { card_number = '{card_number}', invoice_id = '{invoice_id}' }\n"
        "field = 'status'\ncommitted = ['ok']\nnot_found = ['missing']\noutput = 'charge'\n"
    )
    (result,), ledger = guarded_calls(tmp_path, contracts, provider, CHARGE)
    assert not result.is_error, result.content[0].text
    assert result.structured_content["invoice_id"] == "INV-7"
    evidence = json.dumps([event.evidence for event in ledger.events("charge:INV-7")])
    assert '"probe": "find_card_charge"' in evidence
    assert '"arguments": {"card_number": "[redacted]", "invoice_id": "INV-7"}' in evidence
    ledger.close()
    assert (tmp_path / "ledger.db").read_bytes().find(CHARGE["card_number"].encode()) == -1
    assert provider.committed() == 1
    assert provider.attempts() == 1


def test_a_pending_lookup_is_asked_again_never_resent(tmp_path):
    """The lookup says processing, then ok: confirmed by the second look, sent once."""
    provider = FakePaymentProvider(
        idempotency_guaranteed=False, faults=FaultPlan([Fault.PENDING], pending_probes=1)
    )
    contracts = GOOD + (
        "[tools.charge_card.probe]\ntool = 'find_charge'\n"
        "arguments = { reference = '{idempotency_key}' }\nfield = 'status'\n"
        "committed = ['ok']\nnot_found = ['missing']\npending = ['processing']\n"
        "output = 'charge'\n"
    )
    (result,), ledger = guarded_calls(tmp_path, contracts, provider, CHARGE)
    assert not result.is_error, result.content[0].text
    assert result.structured_content["invoice_id"] == "INV-7"
    assert provider.committed() == 1
    assert provider.attempts() == 1
    assert provider.lookups == 2
    ledger.close()


AUDIT = {"actor": "alice", "reason": "the customer asked", "evidence_reference": "T-37"}


def test_a_write_that_requires_approval_is_sent_once_after_a_person_approves_it(tmp_path):
    """requires_approval: nothing is sent until the ledger holds an approval of this request.

    Then one charge, and every later call replays it.
    """
    provider = FakePaymentProvider(lookup=Lookup.STRONG)
    path = write(tmp_path, GOOD + "requires_approval = true\nredact = ['card_number']\n")
    ledger = open_ledger(str(tmp_path / "ledger.db"))
    server = upstream(provider)

    async def run() -> list[Any]:
        async with Client(server) as client:
            tools = list((await client.list_tools()).tools)
            contracts = load_contracts(path)
            assert check_contracts(path, contracts, tools) == []
            proxy = GuardingProxy(client, tools, contracts, EffectExecutor(ledger))
            answers = [await proxy.call_tool("charge_card", CHARGE, "1")]
            answers.append(await proxy.call_tool("charge_card", CHARGE, "2"))
            assert provider.attempts() == 0
            await asyncio.to_thread(ledger.approve, "charge:INV-7", **AUDIT)
            answers.append(await proxy.call_tool("charge_card", CHARGE, "3"))
            answers.append(await proxy.call_tool("charge_card", CHARGE, "4"))
            return answers

    try:
        first, again, sent, replayed = asyncio.run(run())
        for paused in (first, again):
            assert paused.is_error
            payload = paused.meta[PENDING_META_KEY]
            assert payload == paused.structured_content
            assert payload["kind"] == "effectguard.approval"
            assert payload["operation_id"] == "charge:INV-7"
            assert payload["arguments"]["invoice_id"] == "INV-7"
            assert CHARGE["card_number"] not in json.dumps(payload)
            assert payload["approve_command"].startswith("agent-effect-ops --db ")
            assert " approve charge:INV-7 --expect-events " in payload["approve_command"]
            assert "needs a person's approval" in paused.content[0].text
        assert not sent.is_error, sent.content[0].text
        assert not replayed.is_error
        assert sent.structured_content == replayed.structured_content
        assert provider.committed() == 1
        assert provider.attempts() == 1
        record = ledger.get("charge:INV-7")
        assert record is not None
        assert record.status is EffectStatus.CONFIRMED
    finally:
        ledger.close()


def test_a_denied_write_is_never_sent(tmp_path):
    """deny: the next call is a final refusal, and the upstream never sees the request."""
    provider = FakePaymentProvider(lookup=Lookup.STRONG)
    path = write(tmp_path, GOOD + "requires_approval = true\n")
    ledger = open_ledger(str(tmp_path / "ledger.db"))
    server = upstream(provider)

    async def run() -> list[Any]:
        async with Client(server) as client:
            tools = list((await client.list_tools()).tools)
            proxy = GuardingProxy(client, tools, load_contracts(path), EffectExecutor(ledger))
            answers = [await proxy.call_tool("charge_card", CHARGE, "1")]
            await asyncio.to_thread(ledger.deny, "charge:INV-7", **AUDIT)
            answers.append(await proxy.call_tool("charge_card", CHARGE, "2"))
            return answers

    try:
        paused, refused = asyncio.run(run())
        assert paused.meta[PENDING_META_KEY]["kind"] == "effectguard.approval"
        assert refused.is_error
        assert refused.meta is None or PENDING_META_KEY not in refused.meta
        assert provider.attempts() == 0
    finally:
        ledger.close()


def test_a_ledger_that_fails_while_the_approval_request_is_read_is_a_retry_later_refusal(
    tmp_path,
):
    """The request is recorded, then the ledger file goes: the client is told to retry, not asked.

    The file is moved away the moment the ledger records the request (an
    observer of that transition), so the proxy's read of the request, in a
    thread that has no connection yet, finds no ledger. The client gets a
    refusal saying nothing was sent and to retry later, with no approval
    payload (its commands would name an operation nobody can read).
    """
    provider = FakePaymentProvider(lookup=Lookup.STRONG)
    path = write(tmp_path, GOOD + "requires_approval = true\n")
    ledger_path = tmp_path / "ledger.db"
    ledger = open_ledger(str(ledger_path))
    server = upstream(provider)
    executor = EffectExecutor(ledger)

    def move_the_ledger_away(transition: Any) -> None:
        # Called for the recorded transition and again for the call's result: move it once.
        if transition.to_status is EffectStatus.AWAITING_APPROVAL and ledger_path.exists():
            ledger_path.rename(tmp_path / "moved.db")

    executor.add_observer(move_the_ledger_away)

    async def run() -> Any:
        async with Client(server) as client:
            tools = list((await client.list_tools()).tools)
            proxy = GuardingProxy(client, tools, load_contracts(path), executor)
            return await proxy.call_tool("charge_card", CHARGE, "1")

    try:
        refused = asyncio.run(run())
        assert (tmp_path / "moved.db").exists(), "the request was never recorded"
        assert refused.is_error
        text = refused.content[0].text
        assert "charge_card was not sent: operation charge:INV-7 awaits" in text
        assert "the effect ledger failed while it was read" in text
        assert "retry this call later with the same arguments" in text
        assert refused.meta is None or PENDING_META_KEY not in refused.meta
        assert provider.attempts() == 0
    finally:
        ledger.close()
