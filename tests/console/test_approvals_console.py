"""Approvals in the console, through Starlette's test client, over both ledger backends.

Every approval and denial is checked in the ledger and counted at the fake
provider: nothing is sent before an approval, exactly one capture after it,
none after a denial, and a refused form leaves the ledger exactly as it was.
"""

from __future__ import annotations

import html
import re
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from extras_support import import_extra

import_extra("starlette", "console")
import_extra("starlette.testclient", "console")

from console_support import (  # noqa: E402 - imported once the extra is known to be installed
    TOKEN,
    approval_operation,
    awaiting_approval,
    ledger_snapshot,
    operation_id,
    page_csrf,
    page_seen,
    quarantine,
)
from starlette.testclient import TestClient  # noqa: E402 - imported once the extra is known to be installed

from effectguard import (  # noqa: E402 - imported once the extra is known to be installed
    EffectAwaitingApproval,
    EffectLedger,
    EffectRejected,
    EffectStatus,
    EventType,
)
from effectguard.console import ConsoleSettings, create_app  # noqa: E402 - imported once the extra is known to be installed
from effectguard.console.resolve import parse_resolution  # noqa: E402 - imported once the extra is known to be installed
from effectguard.console.security import COOKIE  # noqa: E402 - imported once the extra is known to be installed
from effectguard.operator import parse_approval_duration  # noqa: E402 - imported once the extra is known to be installed

MASKED = "•••••• redacted"


@pytest.fixture
def console(ledger: EffectLedger) -> Iterator[Callable[..., TestClient]]:
    """Open a console over this test's ledger, logged in with the access token, acting as alice."""
    clients: list[TestClient] = []

    def open_console(**options: Any) -> TestClient:
        settings = ConsoleSettings(ledger=ledger, token=TOKEN, actor="alice", **options)
        client = TestClient(create_app(settings), follow_redirects=False)
        client.cookies.set(COOKIE, TOKEN)
        clients.append(client)
        return client

    yield open_console
    for client in clients:
        client.close()


def _decide(client: TestClient, op: str, action: str, **fields: str) -> Any:
    """Post the operation page's resolve form as a browser would, with ``fields`` changed.

    The CSRF token and the state decided on are read off the page now, unless
    ``fields`` brings them (a page loaded earlier).
    """
    page = {} if "csrf" in fields else {"csrf": page_csrf(client, op), **page_seen(client, op)}
    form = {
        **page,
        "operation_id": op,
        "action": action,
        "reason": "the customer's manager signed it off",
        "evidence_reference": "TICKET-9",
        "submit": "apply",
        **fields,
    }
    return client.post("/resolve", data=form)


def _main(page: str) -> str:
    """The page without its header: what the view itself lists."""
    return page[page.index("<main>") :]


def test_the_approvals_page_lists_only_requests_awaiting_approval(
    ledger: EffectLedger, console: Callable[..., TestClient]
):
    """Awaiting ones are listed, longest waiting first, with masked arguments; nothing else is."""
    captures = awaiting_approval(ledger, "A1")
    awaiting_approval(ledger, "<script>x</script>", captures)
    awaiting_approval(ledger, "A3", captures)
    approved = awaiting_approval(ledger, "OK", captures)
    ledger.approve(approval_operation("OK"), actor="bob", reason="r", evidence_reference="e")  # type: ignore[attr-defined]
    ledger.deny(approval_operation("A3"), actor="bob", reason="r", evidence_reference="e")  # type: ignore[attr-defined]
    quarantine(ledger, "Q1")
    client = console()

    page = client.get("/approvals")

    assert page.status_code == 200, page.text
    shown = _main(page.text)
    assert approval_operation("A1") in shown
    assert "&lt;script&gt;x&lt;/script&gt;" in shown
    assert "<script>" not in shown
    waiting = shown[
        shown.index('<table id="approvals"') : shown.index(
            "</table>", shown.index('<table id="approvals"')
        )
    ]
    for absent in (approval_operation("OK"), approval_operation("A3"), operation_id("Q1")):
        assert absent not in waiting, absent
    for absent in (approval_operation("A3"), operation_id("Q1")):
        assert absent not in shown, absent
    sent_later = shown[shown.index('<table id="approved"') :]
    assert approval_operation("OK") in sent_later
    assert approval_operation("A1") not in sent_later
    assert 'data-label="Approved by">bob<' in sent_later
    assert 'data-label="Expires (UTC)">never<' in sent_later
    assert shown.index(approval_operation("A1")) < shown.index("&lt;script&gt;")
    assert "payments.approved_capture v1" in shown
    assert "<dt>amount_cents</dt><dd><code>4200</code></dd>" in shown
    assert MASKED in shown
    assert "tok_secret" not in page.text
    assert re.search(r'data-label="Waiting">\d+s<', shown), "no age shown"
    assert "(2 requests)" in shown
    assert '<a href="/approvals">Needs approval</a>' in page.text
    one = client.get("/approvals", params={"page": "2"})
    assert "(2 requests)" in one.text
    paged = console(page_size=1)
    first, second = paged.get("/approvals").text, paged.get("/approvals", params={"page": "2"}).text
    assert approval_operation("A1") in first
    assert "&lt;script&gt;" not in _main(first)
    assert "&lt;script&gt;" in second
    assert "Page 2 of 2" in second
    other = client.get("/approvals", params={"contract": "refunds"})
    assert "No request awaits approval." in other.text
    assert approved.provider.committed() == 0  # approving sent nothing by itself


def test_the_page_of_an_awaiting_request_offers_approve_and_deny_only(
    ledger: EffectLedger, console: Callable[..., TestClient]
):
    """Approve and deny (with an expiry) for a request awaiting approval; neither elsewhere."""
    awaiting_approval(ledger, "A1")
    quarantine(ledger, "Q1")
    client = console()
    record = ledger.get(approval_operation("A1"))
    assert record is not None
    page = client.get("/operation", params={"id": approval_operation("A1")}).text
    form = page[page.index('id="resolve"') : page.index("</form>", page.index('id="resolve"'))]
    assert re.findall(r'name="action" value="([\w-]+)"', form) == ["approve", "deny"]
    assert 'name="expires_in"' in form
    assert 'name="output_json"' not in form
    assert f'<code id="fingerprint">{record.fingerprint}</code>' in page
    assert MASKED in page
    assert "tok_secret" not in page
    quarantined = client.get("/operation", params={"id": operation_id("Q1")}).text
    actions = re.findall(r'name="action" value="([\w-]+)"', quarantined)
    assert actions == ["confirm", "reject", "authorize-retry"]
    assert 'name="expires_in"' not in quarantined


def test_approve_through_the_form_then_one_call_sends_it_once(
    ledger: EffectLedger, console: Callable[..., TestClient], backend: str, ledger_target: str
):
    """Preview writes nothing and shows what is approved; record: PREPARED, then one capture."""
    captures = awaiting_approval(ledger, "A1")
    op = approval_operation("A1")
    record = ledger.get(op)
    assert record is not None
    client = console()
    before = ledger_snapshot(ledger, backend, ledger_target)

    preview = _decide(client, op, "approve", expires_in="2h", submit="preview")

    assert preview.status_code == 200, preview.text
    assert "Nothing has been written" in preview.text
    assert "You approve exactly this request" in preview.text
    assert f'<code id="fingerprint">{record.fingerprint}</code>' in preview.text
    assert "<dt>amount_cents</dt><dd><code>4200</code></dd>" in preview.text
    assert MASKED in preview.text
    assert "tok_secret" not in preview.text
    assert "within 2h of being recorded" in preview.text
    assert "<td>Status</td><td>AWAITING_APPROVAL</td><td>PREPARED</td>" in preview.text
    assert ledger_snapshot(ledger, backend, ledger_target) == before
    # Record this decision: the preview's own form, as its button posts it.
    form = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', preview.text))
    assert form["expires_in"] == "2h"
    recorded = client.post("/resolve", data={**form, "submit": "apply"})
    assert recorded.status_code == 303, recorded.text
    assert "done=approve" in recorded.headers["location"]

    approved = ledger.get(op)
    assert approved is not None
    assert approved.status is EffectStatus.PREPARED
    last = ledger.events(op)[-1]
    assert last.type is EventType.OPERATOR_APPROVED
    assert last.evidence["actor"] == "alice"
    assert last.evidence["evidence_reference"] == "TICKET-9"
    assert last.evidence["approved_fingerprint"] == record.fingerprint
    expires = datetime.fromisoformat(last.evidence["expires_at"])
    assert abs(expires - (datetime.now(UTC) + timedelta(hours=2))) < timedelta(minutes=1)
    assert captures.provider.committed() == 0  # the approval itself sends nothing
    waiting = _main(client.get("/approvals").text)
    assert f'data-label="Expires (UTC)">{expires:%Y-%m-%d %H:%M:%S}<' in waiting
    assert 'data-label="Approved by">alice<' in waiting

    sent = captures.call(ledger, "A1")
    again = [captures.call(ledger, "A1") for _ in range(2)]
    assert '<table id="approved"' not in client.get("/approvals").text  # spent: gone

    assert captures.provider.committed() == 1
    assert all(output == sent for output in again)
    final = ledger.get(op)
    assert final is not None
    assert final.status is EffectStatus.CONFIRMED
    assert ledger.verify().ok


def test_deny_through_the_form_rejects_it_and_nothing_is_ever_sent(
    ledger: EffectLedger, console: Callable[..., TestClient]
):
    captures = awaiting_approval(ledger, "A1")
    op = approval_operation("A1")

    response = _decide(console(), op, "deny")

    assert response.status_code == 303, response.text
    record = ledger.get(op)
    assert record is not None
    assert record.status is EffectStatus.REJECTED
    assert ledger.events(op)[-1].type is EventType.OPERATOR_DENIED
    for _ in range(2):
        with pytest.raises(EffectRejected):
            captures.call(ledger, "A1")
    assert captures.provider.committed() == 0


@pytest.mark.parametrize(
    ("first", "second"), [("approve", "approve"), ("deny", "approve"), ("approve", "deny")]
)
def test_a_decision_on_a_state_that_has_changed_is_refused(
    ledger: EffectLedger,
    console: Callable[..., TestClient],
    backend: str,
    ledger_target: str,
    first: str,
    second: str,
):
    """Bob decides first, from the CLI or the API; alice's form, loaded before, lands nowhere."""
    captures = awaiting_approval(ledger, "A1")
    op = approval_operation("A1")
    client = console()
    seen = {"csrf": page_csrf(client, op), **page_seen(client, op)}
    getattr(ledger, first)(op, actor="bob", reason="mine", evidence_reference="B-1")
    before = ledger_snapshot(ledger, backend, ledger_target)

    response = _decide(client, op, second, **seen)

    assert response.status_code == 400, response.text
    assert "changed since you looked" in response.text
    assert "Nothing was written" in response.text
    assert ledger_snapshot(ledger, backend, ledger_target) == before
    assert ledger.events(op)[-1].evidence["actor"] == "bob"
    assert captures.provider.committed() == 0


@pytest.mark.parametrize("csrf", ["", "0" * 64, None])
def test_an_approval_without_the_csrf_token_is_forbidden(
    ledger: EffectLedger,
    console: Callable[..., TestClient],
    backend: str,
    ledger_target: str,
    csrf: str | None,
):
    captures = awaiting_approval(ledger, "A1")
    op = approval_operation("A1")
    client = console()
    form = {
        **page_seen(client, op),
        "operation_id": op,
        "action": "approve",
        "reason": "r",
        "evidence_reference": "e",
        "submit": "apply",
    }
    if csrf is not None:
        form["csrf"] = csrf
    before = ledger_snapshot(ledger, backend, ledger_target)

    response = client.post("/resolve", data=form)

    assert response.status_code == 403
    assert "CSRF" in response.text
    assert ledger_snapshot(ledger, backend, ledger_target) == before
    record = ledger.get(op)
    assert record is not None
    assert record.status is EffectStatus.AWAITING_APPROVAL
    assert captures.provider.committed() == 0


@pytest.mark.parametrize("action", ["approve", "deny"])
def test_approve_or_deny_of_an_operation_not_awaiting_approval_is_refused(
    ledger: EffectLedger,
    console: Callable[..., TestClient],
    backend: str,
    ledger_target: str,
    action: str,
):
    """A quarantined payment cannot be approved into a resend; the ledger is left as it was."""
    provider = quarantine(ledger, "Q1")
    op = operation_id("Q1")
    before = ledger_snapshot(ledger, backend, ledger_target)

    response = _decide(console(), op, action)

    assert response.status_code == 400, response.text
    assert "Nothing was written" in response.text
    assert "QUARANTINED" in response.text
    assert ledger_snapshot(ledger, backend, ledger_target) == before
    assert provider.committed() == 1


@pytest.mark.parametrize("action", ["confirm", "reject", "authorize-retry"])
def test_settling_a_request_awaiting_approval_is_refused(
    ledger: EffectLedger,
    console: Callable[..., TestClient],
    backend: str,
    ledger_target: str,
    action: str,
):
    """A hand-made post cannot confirm, reject or retry a request nobody sent, nor send it."""
    captures = awaiting_approval(ledger, "A1")
    op = approval_operation("A1")
    before = ledger_snapshot(ledger, backend, ledger_target)
    response = _decide(
        console(), op, action, output_json='{"id": "cap_1"}', provider_operation_id="cap_1"
    )
    assert response.status_code == 400, response.text
    assert "Nothing was written" in response.text
    assert ledger_snapshot(ledger, backend, ledger_target) == before
    with pytest.raises(EffectAwaitingApproval):
        captures.call(ledger, "A1")
    assert captures.provider.committed() == 0


@pytest.mark.parametrize(
    ("action", "expires_in", "says"),
    [
        ("approve", "soon", "expires in 'soon' is not a duration"),
        ("approve", "2 hours", "is not a duration"),
        ("approve", "-1h", "is not a duration"),
        ("approve", "0s", "is no time at all"),
        ("approve", "99999w", "longer than ten years"),
        ("approve", "9" * 400 + "d", "longer than ten years"),
        ("approve", "1h\n<b>x</b>", "is not a duration"),
        ("deny", "2h", "expires in applies only to approve"),
    ],
)
def test_a_bad_expiry_is_one_line_and_writes_nothing(
    ledger: EffectLedger,
    console: Callable[..., TestClient],
    backend: str,
    ledger_target: str,
    action: str,
    expires_in: str,
    says: str,
):
    captures = awaiting_approval(ledger, "A1")
    op = approval_operation("A1")
    before = ledger_snapshot(ledger, backend, ledger_target)

    response = _decide(console(), op, action, expires_in=expires_in)

    assert response.status_code == 400, response.text
    problem = re.search(r'<p class="problem" id="problem">(.*?)</p>', response.text, re.DOTALL)
    assert problem is not None
    message = html.unescape(problem.group(1))
    assert says in message
    assert "\n" not in message
    assert len(message) < 200
    assert "<b>" not in response.text
    assert ledger_snapshot(ledger, backend, ledger_target) == before
    assert captures.provider.committed() == 0


def test_a_read_only_console_lists_approvals_but_offers_and_serves_no_decision(
    ledger: EffectLedger, console: Callable[..., TestClient], backend: str, ledger_target: str
):
    captures = awaiting_approval(ledger, "A1")
    op = approval_operation("A1")
    client = console(read_only=True)
    assert approval_operation("A1") in client.get("/approvals").text
    page = client.get("/operation", params={"id": op}).text
    assert 'action="/resolve"' not in page
    assert 'value="approve"' not in page
    before = ledger_snapshot(ledger, backend, ledger_target)
    response = client.post(
        "/resolve", data={"operation_id": op, "action": "approve", "reason": "r"}
    )
    assert response.status_code in (404, 405)
    assert ledger_snapshot(ledger, backend, ledger_target) == before
    assert captures.provider.committed() == 0


def _form(**fields: str) -> dict[str, str]:
    return {
        "operation_id": "op",
        "reason": "r",
        "evidence_reference": "e",
        "expect_events": "1",
        "expect_head": "ab" * 32,
        **fields,
    }


@pytest.mark.parametrize(
    ("text", "seconds"), [("", None), ("  ", None), ("30m", 1800.0), ("1.5H", 5400.0)]
)
def test_the_form_reads_expires_in_as_the_cli_reads_expires_in(text: str, seconds: float | None):
    """One parser for both faces: the console's field and ``--expires-in`` agree on every text."""
    parsed = parse_resolution(_form(action="approve", expires_in=text))
    assert parsed.expires_in == seconds
    if seconds is not None:
        assert parse_approval_duration(text) == seconds


def test_approve_and_deny_need_no_output():
    for action in ("approve", "deny"):
        parsed = parse_resolution(_form(action=action))
        assert (parsed.action, parsed.output, parsed.expires_in) == (action, None, None)
    with pytest.raises(ValueError, match="approve needs: reason"):
        parse_resolution(_form(action="approve", reason=""))


def test_the_cli_and_the_console_refuse_a_duration_with_the_same_words():
    from click.testing import CliRunner  # noqa: PLC0415 - only this test drives the CLI

    from effectguard.cli.ops import main  # noqa: PLC0415 - only this test drives the CLI

    audit = ["--actor", "a", "--reason", "r", "--evidence-reference", "e"]
    for text in ("soon", "0s", "99999w"):
        command = ["--db", "/nonexistent/ledger.db", "approve", "op", *audit, "--expires-in", text]
        done = CliRunner().invoke(main, command)
        assert done.exit_code == 2, done.output
        with pytest.raises(ValueError) as caught:
            parse_resolution(_form(action="approve", expires_in=text))
        console_words = str(caught.value).removeprefix("expires in ")
        assert console_words in done.output


def test_an_approved_request_that_is_not_the_one_approved_is_still_a_conflict(
    ledger: EffectLedger, console: Callable[..., TestClient]
):
    """Approving in the console binds to the fingerprint shown: another amount is not sent."""
    captures = awaiting_approval(ledger, "A1")
    assert _decide(console(), approval_operation("A1"), "approve").status_code == 303
    from effectguard import OperationConflictError  # noqa: PLC0415 - this test's one error

    with pytest.raises(OperationConflictError):
        captures.call(ledger, "A1", amount_cents=999_999)
    assert captures.provider.committed() == 0
    captures.call(ledger, "A1")
    assert captures.provider.committed() == 1


def test_an_approved_request_is_no_longer_listed(
    ledger: EffectLedger, console: Callable[..., TestClient]
):
    awaiting_approval(ledger, "A1")
    client = console()
    assert approval_operation("A1") in _main(client.get("/approvals").text)
    assert _decide(client, approval_operation("A1"), "approve").status_code == 303
    assert "No request awaits approval." in client.get("/approvals").text


def test_an_approval_that_ran_out_is_shown_void_until_a_call_finds_it_so(
    ledger: EffectLedger, console: Callable[..., TestClient]
):
    """Approved for a moment, never used: listed as void; the next call sends nothing."""
    captures = awaiting_approval(ledger, "A1")
    op = approval_operation("A1")
    ledger.approve(op, actor="bob", reason="r", evidence_reference="e", expires_in=0.05)  # type: ignore[attr-defined]
    time.sleep(0.1)
    client = console()

    shown = _main(client.get("/approvals").text)

    approved = shown[shown.index('<table id="approved"') :]
    assert op in approved
    assert ": void</span>" in approved
    with pytest.raises(EffectAwaitingApproval):
        captures.call(ledger, "A1")
    assert captures.provider.committed() == 0
    again = _main(client.get("/approvals").text)
    assert '<table id="approved"' not in again
    assert op in again  # awaiting approval once more


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0, "0s"), (59, "59s"), (61, "1m 1s"), (3600, "1h"), (90061, "1d 1h"), (-5, "0s")],
)
def test_a_requests_age_is_shown_in_its_two_largest_units(seconds: int, shown: str):
    from effectguard.console.app import _age  # noqa: PLC0415 - the page's private filter

    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert _age(now - timedelta(seconds=seconds), now) == shown
