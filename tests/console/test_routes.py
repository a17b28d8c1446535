"""The console's routes through Starlette's test client, over both ledger backends.

Every resolution is checked in the ledger and at the fake provider, which must
still hold exactly the one payment it committed before its acknowledgement was lost.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from extras_support import import_extra

import_extra("starlette", "console")
import_extra("starlette.testclient", "console")

from console_support import (  # noqa: E402 - imported once the extra is known to be installed
    CSRF_FIELD,
    RUN_ID,
    RUN_OPERATION,
    TOKEN,
    capture_contract,
    ledger_snapshot,
    operation_id,
    page_csrf,
    page_seen,
    quarantine,
    quarantined_with_probe,
    replay,
    waiting_run,
)
from markupsafe import escape  # noqa: E402 - imported once the extra is known to be installed (jinja2 needs it)
from starlette.testclient import TestClient  # noqa: E402 - imported once the extra is known to be installed

from effectguard import EffectExecutor, EffectLedger, EffectStatus, use_executor  # noqa: E402 - imported once the extra is known to be installed
from effectguard.console import ConsoleSettings, create_app  # noqa: E402 - imported once the extra is known to be installed
from effectguard.console.security import COOKIE, SECURITY_HEADERS  # noqa: E402 - imported once the extra is known to be installed
from effectguard.operator import load_tools  # noqa: E402 - imported once the extra is known to be installed
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan, Lookup  # noqa: E402 - imported once the extra is known to be installed


def _client(ledger: EffectLedger, **options: Any) -> TestClient:
    settings = ConsoleSettings(ledger=ledger, token=TOKEN, actor="alice", **options)
    return TestClient(create_app(settings), follow_redirects=False)


@pytest.fixture
def console(ledger: EffectLedger) -> Iterator[Callable[..., TestClient]]:
    """Open a console over this test's ledger, logged in with the access token."""
    clients: list[TestClient] = []

    def open_console(**options: Any) -> TestClient:
        client = _client(ledger, **options)
        client.cookies.set(COOKIE, TOKEN)
        clients.append(client)
        return client

    yield open_console
    for client in clients:
        client.close()


def _resolve(client: TestClient, op: str, action: str, **fields: str) -> Any:
    form = {
        "csrf": page_csrf(client, op),
        **page_seen(client, op),
        "operation_id": op,
        "action": action,
        "reason": "checked the provider dashboard",
        "evidence_reference": "INC-42",
        **fields,
    }
    return client.post("/resolve", data=form)


def test_every_route_refuses_a_request_without_the_token(ledger: EffectLedger):
    quarantine(ledger, "A1")
    client = _client(ledger)
    for method, path in (
        ("GET", "/"),
        ("GET", "/operation?id=x"),
        ("GET", "/runs"),
        ("POST", "/resolve"),
    ):
        response = client.request(method, path)
        assert response.status_code == 403, (method, path)
        assert "access token" in response.text
    client.cookies.set(COOKIE, "not-the-token-but-long-enough")
    assert client.get("/").status_code == 403
    assert client.get("/", params={"token": "wrong-token-of-some-length"}).status_code == 403


def test_the_token_url_sets_a_strict_cookie_and_drops_the_token_from_the_address(
    ledger: EffectLedger,
):
    quarantine(ledger, "A1")
    client = _client(ledger)
    first = client.get("/", params={"token": TOKEN, "status": "QUARANTINED"})
    assert first.status_code == 303
    assert first.headers["location"] == "/?status=QUARANTINED"
    cookie = first.headers["set-cookie"]
    assert f"{COOKIE}={TOKEN}" in cookie
    assert "httponly" in cookie.lower()
    assert "samesite=strict" in cookie.lower()
    client.cookies.set(COOKIE, TOKEN)
    page = client.get("/", params={"status": "QUARANTINED"})
    assert page.status_code == 200
    assert operation_id("A1") in page.text
    for name, value in SECURITY_HEADERS.items():
        assert page.headers[name] == value
    assert first.headers["x-frame-options"] == "DENY"


def test_needs_attention_lists_filters_and_pages_oldest_first(
    ledger: EffectLedger, console: Callable[..., TestClient]
):
    for invoice in ("A1", "A2", "A3"):
        quarantine(ledger, invoice)
    quarantine(ledger, "B1", contract="refund")
    client = console(page_size=2)
    first = client.get("/").text
    assert first.index(operation_id("A1")) < first.index(operation_id("A2"))
    assert operation_id("A3") not in first
    assert "Page 1 of 2 (4 operations)" in first
    second = client.get("/", params={"page": "2"}).text
    assert operation_id("A3") in second
    assert operation_id("B1") in second
    refunds = client.get("/", params={"contract": "refund"}).text
    assert operation_id("B1") in refunds
    assert operation_id("A1") not in refunds
    unknown = client.get("/", params={"status": "OUTCOME_UNKNOWN"}).text
    assert "Nothing needs a person right now." in unknown
    refused = client.get("/", params={"status": "CONFIRMED"})
    assert refused.status_code == 400
    assert "does not need attention" in refused.text


def test_the_operation_page_shows_its_history_and_a_whole_chain(
    ledger: EffectLedger, console: Callable[..., TestClient]
):
    quarantine(ledger, "A1")
    page = console().get("/operation", params={"id": operation_id("A1")})
    assert page.status_code == 200
    assert ">QUARANTINED<" in page.text
    assert f"Whole: {len(ledger.events(operation_id('A1')))} events" in page.text
    assert "tok_secret" not in page.text
    missing = console().get("/operation", params={"id": "no-such-op"})
    assert missing.status_code == 404


def test_the_operation_page_says_its_reason_once_and_folds_the_raw_evidence(
    ledger: EffectLedger, console: Callable[..., TestClient]
):
    """Outside closed ``<details>`` the reason appears once; the evidence JSON is inside one."""
    quarantine(ledger, "A1")
    record = ledger.get(operation_id("A1"))
    assert record is not None
    assert record.reason
    page = console().get("/operation", params={"id": operation_id("A1")}).text
    disclosures = re.findall(r"<details[^>]*>", page)
    assert disclosures, "the page folds nothing"
    assert not [tag for tag in disclosures if "open" in tag], "a disclosure opens by default"
    shown = re.sub(r"<details.*?</details>", "", page, flags=re.DOTALL)
    assert shown.count(str(escape(record.reason))) == 1
    for repeated in (record.evidence["cause"], record.evidence["error"]["message"]):
        assert repeated in record.reason
        assert shown.count(str(escape(repeated))) == 1
    assert '<pre id="evidence">' in page
    assert '<pre id="evidence">' not in shown
    assert "<pre>" not in shown.split('<table id="events"', 1)[1].split("</table>", 1)[0]


def test_confirm_records_actor_and_reason_and_the_provider_keeps_one_payment(
    ledger: EffectLedger, console: Callable[..., TestClient]
):
    provider = quarantine(ledger, "A1")
    op = operation_id("A1")
    response = _resolve(
        console(), op, "confirm", output_json='{"charge": "ch_1"}', provider_operation_id="ch_1"
    )
    assert response.status_code == 303
    record = ledger.get(op)
    assert record is not None
    assert record.status is EffectStatus.CONFIRMED
    last = ledger.events(op)[-1]
    assert last.evidence["actor"] == "alice"
    assert last.evidence["reason"] == "checked the provider dashboard"
    assert last.evidence["evidence_reference"] == "INC-42"
    assert replay(ledger, "A1", provider).output == {"charge": "ch_1"}
    assert provider.committed() == 1


def test_reject_and_authorize_retry_go_through_the_audited_api(
    ledger: EffectLedger, console: Callable[..., TestClient]
):
    quarantine(ledger, "A1")
    quarantine(ledger, "A2")
    client = console()
    assert _resolve(client, operation_id("A1"), "reject").status_code == 303
    assert _resolve(client, operation_id("A2"), "authorize-retry").status_code == 303
    rejected, retried = ledger.get(operation_id("A1")), ledger.get(operation_id("A2"))
    assert rejected is not None
    assert retried is not None
    assert rejected.status is EffectStatus.REJECTED
    assert retried.status is EffectStatus.PREPARED
    assert retried.attempt_budget == retried.attempts + 1


@pytest.mark.parametrize(
    ("change", "status", "says"),
    [
        ({"csrf": "0" * 64}, 403, "CSRF"),
        ({"csrf": ""}, 403, "CSRF"),
        ({"reason": "  "}, 400, "confirm needs: reason"),
        ({"output_json": "{not json"}, 400, "not valid JSON"),
        ({"output_json": "NaN"}, 400, "not a JSON number"),
        ({"action": "delete"}, 400, "unknown action"),
        ({"operation_id": "no-such-op"}, 400, "no-such-op"),
    ],
)
def test_a_refused_write_leaves_the_ledger_exactly_as_it_was(
    ledger: EffectLedger,
    console: Callable[..., TestClient],
    backend: str,
    ledger_target: str,
    change: dict[str, str],
    status: int,
    says: str,
):
    provider = quarantine(ledger, "A1")
    op = operation_id("A1")
    client = console()
    form = {
        "csrf": page_csrf(client, op),
        **page_seen(client, op),
        "operation_id": op,
        "action": "confirm",
        "reason": "checked",
        "evidence_reference": "INC-1",
        "output_json": '{"charge": "ch_1"}',
        "provider_operation_id": "ch_1",
        **change,
    }
    before = ledger_snapshot(ledger, backend, ledger_target)
    response = client.post("/resolve", data=form)
    assert response.status_code == status, response.text
    assert says in response.text
    assert "Nothing was written" in response.text
    assert ledger_snapshot(ledger, backend, ledger_target) == before
    assert provider.committed() == 1


def test_resolving_a_settled_operation_is_refused(
    ledger: EffectLedger, console: Callable[..., TestClient]
):
    quarantine(ledger, "A1")
    client = console()
    op = operation_id("A1")
    csrf = page_csrf(client, op)
    seen = page_seen(client, op)
    assert _resolve(client, op, "reject").status_code == 303
    again = client.post(
        "/resolve",
        data={
            "csrf": csrf,
            **seen,
            "operation_id": op,
            "action": "authorize-retry",
            "reason": "r",
            "evidence_reference": "e",
        },
    )
    assert again.status_code == 400
    assert "changed since you looked: reload" in again.text
    assert "it is now REJECTED" in again.text
    assert ledger.get(op).status.value == "REJECTED"  # type: ignore[union-attr]


def test_read_only_serves_no_write_route_and_no_form(
    ledger: EffectLedger, console: Callable[..., TestClient], backend: str, ledger_target: str
):
    quarantine(ledger, "A1")
    client = console(read_only=True)
    page = client.get("/operation", params={"id": operation_id("A1")})
    assert page.status_code == 200
    assert 'action="/resolve"' not in page.text
    before = ledger_snapshot(ledger, backend, ledger_target)
    response = client.post(
        "/resolve", data={"operation_id": operation_id("A1"), "action": "reject"}
    )
    assert response.status_code in (404, 405)
    assert ledger_snapshot(ledger, backend, ledger_target) == before


def test_hostile_ids_and_evidence_are_escaped(
    ledger: EffectLedger, console: Callable[..., TestClient]
):
    hostile = "<script>alert(1)</script>"
    quarantine(ledger, hostile)
    client = console()
    for page in (
        client.get("/"),
        client.get("/operation", params={"id": operation_id(hostile)}),
    ):
        assert page.status_code == 200
        assert "<script>" not in page.text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    refused = client.post(
        "/resolve",
        data={
            "csrf": page_csrf(client, operation_id(hostile)),
            **page_seen(client, operation_id(hostile)),
            "operation_id": hostile,
            "action": "reject",
            "reason": "r",
            "evidence_reference": hostile,
        },
    )
    assert refused.status_code == 400
    assert "<script>" not in refused.text


def test_preview_shows_the_change_and_writes_nothing(
    ledger: EffectLedger, console: Callable[..., TestClient], backend: str, ledger_target: str
):
    provider = quarantine(ledger, "A1")
    op = operation_id("A1")
    before = ledger_snapshot(ledger, backend, ledger_target)
    page = _resolve(
        console(),
        op,
        "confirm",
        output_json='{"charge": "ch_1"}',
        provider_operation_id="ch_1",
        submit="preview",
    )
    assert page.status_code == 200, page.text
    assert "Nothing has been written" in page.text
    assert re.search(r"<td>Status</td><td>QUARANTINED</td><td>CONFIRMED</td>", page.text)
    assert "the output is unchecked" in page.text
    assert ledger_snapshot(ledger, backend, ledger_target) == before
    assert provider.committed() == 1


def test_with_tools_an_output_of_the_wrong_type_is_refused(
    ledger: EffectLedger, console: Callable[..., TestClient], backend: str, ledger_target: str
):
    tools = quarantined_with_probe(ledger)
    client = console(tools=load_tools([tools]))
    before = ledger_snapshot(ledger, backend, ledger_target)
    refused = _resolve(
        client,
        "invoice:INV-9:capture",
        "confirm",
        output_json='"yes it went through"',
        provider_operation_id="ch_9",
    )
    assert refused.status_code == 400
    assert "does not match" in refused.text
    assert ledger_snapshot(ledger, backend, ledger_target) == before
    accepted = _resolve(
        client,
        "invoice:INV-9:capture",
        "confirm",
        output_json='{"id": "ch_9"}',
        provider_operation_id="ch_9",
    )
    assert accepted.status_code == 303
    assert tools.provider.committed() == 1


def test_reprobe_confirms_on_the_providers_evidence_and_never_sends(
    ledger: EffectLedger, console: Callable[..., TestClient], backend: str, ledger_target: str
):
    tools = quarantined_with_probe(ledger)
    op = "invoice:INV-9:capture"
    assert console().post("/reprobe", data={"operation_id": op}).status_code in (404, 405)
    client = console(tools=load_tools([tools]))
    page = client.get("/operation", params={"id": op})
    assert 'action="/reprobe"' in page.text
    csrf = CSRF_FIELD.search(page.text)
    assert csrf is not None
    down = client.post(
        "/reprobe", data={"csrf": csrf.group(1), "operation_id": op, "submit": "apply"}
    )
    assert down.status_code == 303
    still = ledger.get(op)
    assert still is not None
    assert still.status is EffectStatus.QUARANTINED
    tools.probe_down = False
    before = ledger_snapshot(ledger, backend, ledger_target)
    preview = client.post(
        "/reprobe", data={"csrf": csrf.group(1), "operation_id": op, "submit": "preview"}
    )
    assert preview.status_code == 200
    assert "COMMITTED" in preview.text
    assert "QUARANTINED → CONFIRMED" in preview.text
    assert ledger_snapshot(ledger, backend, ledger_target) == before
    applied = client.post(
        "/reprobe", data={"csrf": csrf.group(1), "operation_id": op, "submit": "apply"}
    )
    assert applied.status_code == 303
    record = ledger.get(op)
    assert record is not None
    assert record.status is EffectStatus.CONFIRMED
    assert "alice (console" in str(ledger.events(op)[-1].evidence.get("reprobed_by"))
    assert tools.provider.committed() == 1
    assert tools.provider.requests == 1


def _form_fields(page: str) -> dict[str, str]:
    """The resolve form's hidden and prefilled fields, as the browser would post them."""
    form = page[page.index('id="resolve"') : page.index("</form>", page.index('id="resolve"'))]
    fields = dict(re.findall(r'name="(\w+)" value="([^"]*)"', form))
    output = re.search(r'<textarea name="output_json"[^>]*>(.*?)</textarea>', form, re.DOTALL)
    assert output is not None
    fields["output_json"] = html.unescape(output.group(1))
    fields["provider_operation_id"] = html.unescape(fields.get("provider_operation_id", ""))
    return fields


def test_the_confirm_form_is_filled_from_the_probe_and_bound_to_that_state(
    ledger: EffectLedger, console: Callable[..., TestClient], backend: str, ledger_target: str
):
    """The probe's output prefills confirm; it lands on the state probed, never on a later one."""
    tools = quarantined_with_probe(ledger)
    op = "invoice:INV-9:capture"
    client = console(tools=load_tools([tools]))
    csrf = page_csrf(client, op)
    assert 'formaction="/fill-from-probe"' in client.get("/operation", params={"id": op}).text
    before = ledger_snapshot(ledger, backend, ledger_target)
    down = client.post("/fill-from-probe", data={"csrf": csrf, "operation_id": op})
    assert down.status_code == 400
    assert "answers UNKNOWN, not committed" in down.text
    tools.probe_down = False

    filled = client.post("/fill-from-probe", data={"csrf": csrf, "operation_id": op})

    assert filled.status_code == 200
    assert 'id="probed"' in filled.text
    fields = _form_fields(filled.text)
    capture = tools.provider.effects()[0]["response"]
    assert json.loads(fields["output_json"]) == capture
    assert fields["provider_operation_id"] == capture["id"]
    assert ledger_snapshot(ledger, backend, ledger_target) == before  # asking wrote nothing
    # Another operator moves the operation on before this one submits the filled form.
    ledger.authorize_retry(op, actor="bob", reason="try again", evidence_reference="INC-1")
    form = {**fields, "action": "confirm", "reason": "the probe", "evidence_reference": "INC-2"}
    stale = client.post("/resolve", data={**form, "submit": "apply"})
    assert stale.status_code == 400
    assert "changed since you looked" in stale.text
    after = ledger.get(op)
    assert after is not None
    assert after.status is EffectStatus.PREPARED  # bob's decision, and only bob's
    assert [e.type.value for e in ledger.events(op)][-1] == "operator_retry_authorized"
    assert tools.provider.committed() == 1
    assert tools.provider.requests == 1


def test_the_filled_form_confirms_the_probes_output(
    ledger: EffectLedger, console: Callable[..., TestClient]
):
    """Submitted unchanged, the prefilled form confirms; the next call replays, nothing is sent."""
    tools = quarantined_with_probe(ledger)
    op = "invoice:INV-9:capture"
    client = console(tools=load_tools([tools]))
    tools.probe_down = False
    filled = client.post(
        "/fill-from-probe", data={"csrf": page_csrf(client, op), "operation_id": op}
    )
    form = {
        **_form_fields(filled.text),
        "action": "confirm",
        "reason": "the probe and the dashboard agree",
        "evidence_reference": "INC-3",
        "submit": "apply",
    }
    assert client.post("/resolve", data=form).status_code == 303
    record = ledger.get(op)
    assert record is not None
    assert record.status is EffectStatus.CONFIRMED
    assert record.provider_operation_id == tools.provider.effects()[0]["response"]["id"]
    with use_executor(EffectExecutor(ledger)):
        again = tools.capture.execute("INV-9", 900)
    assert again.replayed
    assert again.output == tools.provider.effects()[0]["response"]
    assert tools.provider.committed() == 1
    assert tools.provider.requests == 1


def test_the_runs_page_lists_a_waiting_run_and_what_blocks_it(tmp_path: Path):
    waiting_run(tmp_path)
    from effectguard import open_ledger  # noqa: PLC0415 - this test's own ledger file

    ledger = open_ledger(tmp_path / "ledger.db")
    try:
        client = _client(ledger, checkpoints=str(tmp_path / "runs.db"))
        client.cookies.set(COOKIE, TOKEN)
        page = client.get("/runs")
        assert page.status_code == 200
        assert RUN_ID in page.text
        assert RUN_OPERATION in page.text
        assert "needs a person" in page.text
        detail = client.get("/operation", params={"id": RUN_OPERATION})
        assert "Runs waiting on it" in detail.text
        assert RUN_ID in detail.text
    finally:
        ledger.close()


def test_a_decision_previewed_on_an_earlier_attempt_is_refused_after_the_operation_moved_on(
    ledger: EffectLedger, console: Callable[..., TestClient], backend: str, ledger_target: str
):
    # Operator B previews "reject" on attempt 1's evidence...
    provider = FakePaymentProvider(
        idempotency_guaranteed=False,
        lookup=Lookup.NONE,
        faults=FaultPlan([Fault.LOSE_ACK, Fault.LOSE_ACK]),
    )
    arguments = {"invoice_id": "A1", "amount_cents": 1250, "card_token": "tok_secret"}
    executor = EffectExecutor(ledger)
    assert executor.execute(capture_contract(), arguments, provider.handler).status is (
        EffectStatus.QUARANTINED
    )
    op = operation_id("A1")
    client = console()
    preview = _resolve(client, op, "reject", submit="preview")
    assert preview.status_code == 200, preview.text
    form = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', preview.text))
    assert form["expect_events"] == str(ledger.get(op).event_count)  # type: ignore[union-attr]
    # ...meanwhile operator A authorizes a retry, and attempt 2 commits and is quarantined again.
    ledger.authorize_retry(op, actor="a", reason="r", evidence_reference="e")
    assert executor.execute(capture_contract(), arguments, provider.handler).status is (
        EffectStatus.QUARANTINED
    )
    assert provider.committed() == 2
    before = ledger_snapshot(ledger, backend, ledger_target)
    # B presses the preview's submit: refused, because it was decided on attempt 1.
    form["submit"] = "apply"
    response = client.post("/resolve", data=form)
    assert response.status_code == 400, response.text
    assert "changed since you looked: reload" in response.text
    assert "Nothing was written" in response.text
    assert ledger_snapshot(ledger, backend, ledger_target) == before
    record = ledger.get(op)
    assert record is not None
    assert record.status is EffectStatus.QUARANTINED
    assert record.attempts == 2
    assert provider.committed() == 2


def test_a_form_without_the_state_it_was_decided_on_is_refused(
    ledger: EffectLedger, console: Callable[..., TestClient], backend: str, ledger_target: str
):
    quarantine(ledger, "A1")
    op = operation_id("A1")
    client = console()
    before = ledger_snapshot(ledger, backend, ledger_target)
    for seen in ({}, {"expect_events": "1"}, {"expect_events": "x", "expect_head": "ab" * 8}):
        form = {
            "csrf": page_csrf(client, op),
            "operation_id": op,
            "action": "reject",
            "reason": "r",
            "evidence_reference": "e",
            **seen,
        }
        response = client.post("/resolve", data=form)
        assert response.status_code == 400, response.text
        assert "which state of the operation" in response.text
    wrong = {**page_seen(client, op), "expect_head": "0" * 64}
    response = _resolve(client, op, "reject", **wrong)
    assert response.status_code == 400
    assert "changed since you looked" in response.text
    assert ledger_snapshot(ledger, backend, ledger_target) == before


def test_only_the_bound_address_and_localhost_are_answered(
    ledger: EffectLedger, console: Callable[..., TestClient], backend: str, ledger_target: str
):
    """A DNS-rebinding page (another Host that resolves here) gets 421, even with the token."""
    quarantine(ledger, "A1")
    client = console(hosts=frozenset({"127.0.0.1:8765", "localhost:8765"}))
    before = ledger_snapshot(ledger, backend, ledger_target)
    for host in ("evil.example", "evil.example:8765", "127.0.0.1:9999", ""):
        page = client.get("/", headers={"host": host})
        assert page.status_code == 421, (host, page.status_code)
        assert "answers only to the address" in page.text
        assert "invoice:A1:capture" not in page.text
        posted = client.post("/resolve", data={"operation_id": "x"}, headers={"host": host})
        assert posted.status_code == 421
    for host in ("127.0.0.1:8765", "LOCALHOST:8765"):
        assert client.get("/", headers={"host": host}).status_code == 200
    assert ledger_snapshot(ledger, backend, ledger_target) == before


@pytest.mark.parametrize("path", ["//evil.example/", "///evil.example/x", "/\\evil.example/"])
def test_the_token_redirect_never_leaves_the_origin(ledger: EffectLedger, path: str):
    """``GET //evil.example/?token=...`` redirects to a path on this origin, never off it."""
    client = _client(ledger)
    response = client.get(f"http://testserver{path}", params={"token": TOKEN})
    assert response.status_code == 303
    location = response.headers["location"]
    assert location.startswith("/")
    assert not location.startswith(("//", "/\\"))  # a path here, not another host


def test_a_probe_answer_without_a_provider_id_still_fills_a_form_that_confirms(
    ledger: EffectLedger, console: Callable[..., TestClient]
):
    """A committed answer with no id: the form is submitted with the id empty, and confirms."""
    from effectguard import OutcomeProbeResult  # noqa: PLC0415 - only this test answers by hand

    tools = quarantined_with_probe(ledger)
    op = "invoice:INV-9:capture"
    tools.probe_down = False
    # The provider found the effect, but says nothing of an id for it.
    committed = {k: v for k, v in tools.provider.effects()[0]["response"].items() if k != "id"}
    tools.provider.probe = lambda *a, **k: OutcomeProbeResult.committed(committed)  # type: ignore[method-assign]
    client = console(tools=load_tools([tools]))
    filled = client.post(
        "/fill-from-probe", data={"csrf": page_csrf(client, op), "operation_id": op}
    )
    fields = _form_fields(filled.text)
    assert fields["provider_operation_id"] == ""
    form = {
        **fields,
        "action": "confirm",
        "reason": "r",
        "evidence_reference": "E",
        "submit": "apply",
    }

    assert client.post("/resolve", data=form).status_code == 303

    record = ledger.get(op)
    assert record is not None
    assert record.status is EffectStatus.CONFIRMED
    assert record.provider_operation_id is None
    assert tools.provider.committed() == 1


def test_an_operation_that_moves_while_the_console_probes_is_not_shown_as_tampered(
    ledger: EffectLedger, console: Callable[..., TestClient]
):
    """The state moved during the probe: one line asking to reload, never a chain alarm."""
    tools = quarantined_with_probe(ledger)
    op = "invoice:INV-9:capture"
    tools.probe_down = False
    answer = tools.provider.probe

    def moving_probe(*args: Any, **kwargs: Any) -> Any:
        # Another operator acts while the provider is being asked.
        ledger.authorize_retry(op, actor="bob", reason="retry", evidence_reference="E-1")  # type: ignore[attr-defined]
        return answer(*args, **kwargs)

    tools.provider.probe = moving_probe  # type: ignore[method-assign]
    client = console(tools=load_tools([tools]))
    csrf = page_csrf(client, op)

    moved = client.post("/fill-from-probe", data={"csrf": csrf, "operation_id": op})

    assert moved.status_code == 409
    assert "changed while the probe answered" in moved.text
    assert "does not match" not in moved.text
    assert tools.provider.committed() == 1
