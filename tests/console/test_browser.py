"""The console in a real browser: Debian's chromium, driven by Selenium, against a real server.

The 3 a.m. path end to end: a run waits on a payment whose acknowledgement was
lost; ``agent-effect-ops serve`` (the installed console script, a real process
on a free port) shows it; the operator opens it, confirms it with a reason;
the ledger holds CONFIRMED with that actor and reason, the provider still
holds exactly one payment, and the run resumes to completion without a
second one.

A request held for approval: found on the Needs approval page, read (its
arguments, the card token masked, its fingerprint), approved with an expiry
through Preview and Record; the provider holds nothing until the next call,
and exactly one capture after it.

The same pages at a phone's width (390 CSS pixels): every value is on screen
and nothing scrolls sideways. The operation page says its reason once and folds
the raw evidence into a closed ``<details>``.

A screenshot of each page is saved in ``EFFECTGUARD_SCREENSHOT_DIR`` (a pytest
temporary directory when unset). ``.ci/run`` keeps them under
``.ci/artifacts/screenshots``; docs/console.md regenerates its pictures that way.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from extras_support import REQUIRE_EXTRAS, extras_required, import_extra

import_extra("starlette", "console")
import_extra("selenium", "dev")

from console_support import (  # noqa: E402 - imported once the extra is known to be installed
    RUN_ID,
    RUN_OPERATION,
    ApprovedCaptures,
    approval_operation,
    awaiting_approval,
    open_runtime,
    waiting_run,
)
from selenium import webdriver  # noqa: E402 - imported once the extra is known to be installed
from selenium.common.exceptions import WebDriverException  # noqa: E402 - imported once the extra is known to be installed
from selenium.webdriver.chrome.service import Service  # noqa: E402 - imported once the extra is known to be installed
from selenium.webdriver.common.by import By  # noqa: E402 - imported once the extra is known to be installed
from selenium.webdriver.support.wait import WebDriverWait  # noqa: E402 - imported once the extra is known to be installed

from effectguard import EffectStatus, open_ledger  # noqa: E402 - imported once the extra is known to be installed
from effectguard.runtime import RunState  # noqa: E402 - imported once the extra is known to be installed

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
SCREENSHOT_DIR = "EFFECTGUARD_SCREENSHOT_DIR"
#: An iPhone 12-15's width in CSS pixels, the narrowest the console is laid out for.
PHONE_WIDTH = 390
PHONE_HEIGHT = 844


def _require_browser() -> None:
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not Path(path).exists()]
    if missing:
        reason = (
            f"needs Debian's chromium and chromium-driver ({', '.join(missing)} missing): "
            "apt-get install -y chromium chromium-driver"
        )
        if extras_required():
            pytest.fail(f"{reason}, and {REQUIRE_EXTRAS}=1 is set", pytrace=False)
        pytest.skip(reason)


@pytest.fixture
def browser() -> Iterator[Any]:
    """A headless chromium, never downloaded: Debian's binary and driver."""
    _require_browser()
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1280,1000",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


@pytest.fixture
def screenshots(tmp_path: Path) -> Path:
    """Where this test saves a picture of each page it visits (kept by CI as artifacts)."""
    directory = Path(os.environ.get(SCREENSHOT_DIR) or tmp_path / "screenshots")
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@pytest.fixture
def console_url(tmp_path: Path) -> Iterator[str]:
    """The token URL of a console serving a run that waits on a quarantined payment."""
    waiting_run(tmp_path)
    server, url = _serve(tmp_path)
    try:
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)


def _go(browser: Any, element: Any) -> None:
    """Click a link or a submit button and wait for the next page.

    A click returns as soon as it is dispatched; looking for the next page's
    elements before it has replaced this one finds nothing, or this page's.

    A mark set on this page's window is gone once another document has replaced
    it. Asked while the navigation is under way, chromedriver may answer with an
    inspector error ("Node with given id does not belong to the document")
    instead of a stale element, so such errors only mean "not yet".
    """
    browser.execute_script("window.effectguardLeft = true;")
    element.click()
    WebDriverWait(browser, 20, ignored_exceptions=(WebDriverException,)).until(_replaced)


def _replaced(browser: Any) -> bool:
    """True once the marked page is gone and its successor has loaded."""
    return bool(
        browser.execute_script(
            "return window.effectguardLeft === undefined && document.readyState === 'complete';"
        )
    )


def _serve(workdir: Path) -> tuple[subprocess.Popen[str], str]:
    """Start the installed console script on a free port; return it and its token URL."""
    script = shutil.which("agent-effect-ops", path=str(Path(sys.executable).parent))
    assert script is not None, "the agent-effect-ops console script is not installed"
    server = subprocess.Popen(
        [
            script,
            "--db",
            str(workdir / "ledger.db"),
            "serve",
            "--port",
            "0",
            "--actor",
            "alice",
            "--checkpoints",
            str(workdir / "runs.db"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    for _ in range(5):
        line = server.stdout.readline()
        if line.startswith("open "):
            return server, line.split(" ", 1)[1].strip()
    server.kill()
    msg = f"the console printed no URL: {server.communicate()}"
    raise AssertionError(msg)


def _operator_confirms(browser: Any, url: str, screenshots: Path) -> None:
    """What the operator does: find the payment, read it, confirm it with a reason."""
    browser.get(url)
    assert "/?token=" not in browser.current_url, "the token must leave the address bar"
    assert browser.find_element(By.TAG_NAME, "h1").text == "Needs attention"
    assert "acting as alice" in browser.find_element(By.TAG_NAME, "header").text
    browser.save_screenshot(str(screenshots / "landing.png"))

    filters = browser.find_element(By.CSS_SELECTOR, "form.filters")
    filters.find_element(By.CSS_SELECTOR, "select[name=status] option[value=QUARANTINED]").click()
    _go(browser, filters.find_element(By.CSS_SELECTOR, "button[type=submit]"))
    assert "status=QUARANTINED" in browser.current_url
    table = browser.find_element(By.ID, "operations").text
    assert RUN_OPERATION in table
    assert "QUARANTINED" in table
    browser.save_screenshot(str(screenshots / "needs-attention.png"))

    _go(browser, browser.find_element(By.LINK_TEXT, "Waiting runs"))
    runs = browser.find_element(By.ID, "runs").text
    assert RUN_ID in runs
    assert RUN_OPERATION in runs
    browser.save_screenshot(str(screenshots / "waiting-runs.png"))

    _go(browser, browser.find_element(By.LINK_TEXT, RUN_OPERATION))
    assert browser.find_element(By.ID, "status").text == "QUARANTINED"
    assert browser.find_element(By.ID, "chain").text.startswith("Whole:")
    browser.save_screenshot(str(screenshots / "operation.png"))
    form = browser.find_element(By.ID, "resolve")
    form.find_element(By.CSS_SELECTOR, "input[value=confirm]").click()
    form.find_element(By.NAME, "reason").send_keys("charge ch_7 is in the provider dashboard")
    form.find_element(By.NAME, "evidence_reference").send_keys("INC-7")
    form.find_element(By.NAME, "output_json").send_keys('{"charge": "ch_7", "captured": 700}')
    form.find_element(By.NAME, "provider_operation_id").send_keys("ch_7")
    browser.save_screenshot(str(screenshots / "resolve-form.png"))
    _go(browser, form.find_element(By.CSS_SELECTOR, "button[value=preview]"))

    assert "Nothing has been written" in browser.find_element(By.ID, "preview").text
    assert "CONFIRMED" in browser.find_element(By.ID, "changes").text
    browser.save_screenshot(str(screenshots / "preview.png"))
    _go(browser, browser.find_element(By.CSS_SELECTOR, "#confirm-preview button[value=apply]"))

    assert browser.find_element(By.ID, "status").text == "CONFIRMED"
    assert "Recorded: confirm" in browser.find_element(By.ID, "done").text
    browser.save_screenshot(str(screenshots / "confirmed.png"))


def test_an_operator_confirms_a_quarantined_payment_in_the_browser_and_the_run_resumes(
    tmp_path: Path, browser: Any, screenshots: Path
):
    """Found, read, previewed and confirmed in chromium; the run then resumes on one payment."""
    provider = waiting_run(tmp_path)
    server, url = _serve(tmp_path)
    try:
        _operator_confirms(browser, url, screenshots)
    finally:
        server.terminate()
        server.wait(timeout=10)

    ledger = open_ledger(tmp_path / "ledger.db")
    try:
        record = ledger.get(RUN_OPERATION)
        assert record is not None
        assert record.status is EffectStatus.CONFIRMED
        last = ledger.events(RUN_OPERATION)[-1]
        assert last.evidence["actor"] == "alice"
        assert last.evidence["reason"] == "charge ch_7 is in the provider dashboard"
    finally:
        ledger.close()
    assert provider.committed() == 1

    runtime, close = open_runtime(tmp_path, provider)
    try:
        resumed = runtime.resume(RUN_ID)
    finally:
        close()
    assert resumed.state is RunState.COMPLETED
    assert provider.committed() == 1


def _payment(workdir: Path) -> Any:
    """The ledger's record of the run's payment, as it is now."""
    ledger = open_ledger(workdir / "ledger.db")
    try:
        record = ledger.get(RUN_OPERATION)
    finally:
        ledger.close()
    assert record is not None
    return record


def _at_phone_width(browser: Any) -> None:
    """Lay pages out as a phone does: 390 CSS pixels wide.

    Desktop emulation (``mobile: False``) on purpose: a mobile viewport zooms out
    to fit content that overflows, which would hide the very overflow measured here.
    """
    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": PHONE_WIDTH, "height": PHONE_HEIGHT, "deviceScaleFactor": 1, "mobile": False},
    )


def _save_whole_page(browser: Any, path: Path) -> None:
    """Save the whole length of the page, as one tall picture: a phone page runs long."""
    size = browser.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    # Captured beyond the viewport, the page has no scrollbar: it is laid out the full width.
    width = max(size["width"], browser.execute_script("return window.innerWidth"))
    shot = browser.execute_cdp_cmd(
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": width, "height": size["height"], "scale": 1},
        },
    )
    path.write_bytes(base64.b64decode(shot["data"]))


def _assert_no_sideways_scroll(browser: Any) -> None:
    """The page is no wider than the screen, and no wider than what its scrollbar leaves."""
    width = browser.execute_script("return window.innerWidth")
    assert width == PHONE_WIDTH, f"the viewport is {width}px wide, not {PHONE_WIDTH}px"
    scroll, client = browser.execute_script(
        "const html = document.documentElement; return [html.scrollWidth, html.clientWidth];"
    )
    assert scroll <= width, f"the page is {scroll}px wide on a {width}px screen"
    # A desktop scrollbar takes its width from the page: what is under it is off screen too.
    wide = browser.execute_script(
        "const edge = document.documentElement.clientWidth;"
        "return Array.from(document.querySelectorAll('body *'))"
        ".filter(e => e.getBoundingClientRect().right > edge + 0.5)"
        ".map(e => e.tagName + (e.id ? '#' + e.id : '') + ' ' + e.getBoundingClientRect().right);"
    )
    assert scroll <= client, f"the page is {scroll}px wide, {client}px visible: {wide[:8]}"


def _assert_on_screen(browser: Any, element_id: str) -> None:
    """The element with this id is laid out, and neither of its edges is off the screen."""
    box = browser.execute_script(
        "const r = document.getElementById(arguments[0]).getBoundingClientRect();"
        "return {left: r.left, right: r.right, width: r.width};",
        element_id,
    )
    width, client = browser.execute_script(
        "return [window.innerWidth, document.documentElement.clientWidth];"
    )
    assert box["width"] > 0, f"#{element_id} is not laid out"
    assert box["left"] >= 0, f"#{element_id} starts left of the screen: {box}"
    assert box["right"] <= width, f"#{element_id} ends at {box['right']}px on a {width}px screen"
    assert box["right"] <= client, f"#{element_id} ends under the scrollbar: {box}"


def test_at_phone_width_every_value_of_an_operation_is_on_screen(
    tmp_path: Path, browser: Any, screenshots: Path, console_url: str
):
    """At 390 px every page fits: on the operation's, the badge, contract and key are on screen."""
    browser.get(console_url)
    _at_phone_width(browser)
    browser.refresh()
    _assert_no_sideways_scroll(browser)
    assert RUN_OPERATION in browser.find_element(By.ID, "operations").text
    _save_whole_page(browser, screenshots / "needs-attention-phone.png")
    _go(browser, browser.find_element(By.LINK_TEXT, "Waiting runs"))
    assert RUN_ID in browser.find_element(By.ID, "runs").text
    _assert_no_sideways_scroll(browser)
    _go(browser, browser.find_element(By.LINK_TEXT, "Needs attention"))

    _go(browser, browser.find_element(By.LINK_TEXT, RUN_OPERATION))
    assert browser.find_element(By.ID, "status").text == "QUARANTINED"
    _assert_no_sideways_scroll(browser)
    for element_id in ("operation-id", "status", "contract", "provider-key", "reason"):
        _assert_on_screen(browser, element_id)
    assert browser.find_element(By.ID, "contract").text == "payments.capture v1"
    assert browser.find_element(By.ID, "provider-key").text == "capture:INV-7"
    # The labels stack above their values: the value starts where its label does.
    label, value = browser.execute_script(
        "const dd = document.getElementById('contract');"
        "return [dd.previousElementSibling.getBoundingClientRect().left,"
        " dd.getBoundingClientRect().left];"
    )
    assert value == label
    _save_whole_page(browser, screenshots / "operation-phone.png")

    browser.find_element(By.CSS_SELECTOR, "#resolve input[value=reject]").click()
    browser.find_element(By.NAME, "reason").send_keys("no charge at the provider")
    browser.find_element(By.NAME, "evidence_reference").send_keys("INC-8")
    _go(browser, browser.find_element(By.CSS_SELECTOR, "#resolve button[value=preview]"))
    assert "Nothing has been written" in browser.find_element(By.ID, "preview").text
    _assert_no_sideways_scroll(browser)
    _save_whole_page(browser, screenshots / "preview-phone.png")
    assert _payment(tmp_path).status is EffectStatus.QUARANTINED, "a preview writes nothing"


def test_the_operation_page_says_its_reason_once_and_folds_the_raw_evidence(
    tmp_path: Path, browser: Any, screenshots: Path, console_url: str
):
    """The reason is shown once; the raw evidence and each event's sit in closed details."""
    record = _payment(tmp_path)
    reason, evidence = record.reason, record.evidence
    cause, message = evidence["cause"], evidence["error"]["message"]
    assert cause in reason, "the scenario's evidence repeats the reason"
    browser.get(console_url)
    _go(browser, browser.find_element(By.LINK_TEXT, RUN_OPERATION))

    assert browser.find_element(By.ID, "reason").text == reason
    visible = browser.execute_script("return document.body.innerText")
    for text in (reason, cause, message):
        assert visible.count(text) == 1, (text, visible)
    assert browser.find_element(By.TAG_NAME, "body").text.count(cause) == 1

    raw = browser.find_element(By.ID, "evidence")
    assert not raw.is_displayed()
    assert browser.execute_script(
        "const d = arguments[0].closest('details'); return d !== null && !d.open;", raw
    )
    folded = browser.execute_script(
        "return Array.from(document.querySelectorAll('#events pre'),"
        " p => { const d = p.closest('details'); return d !== null && !d.open; });"
    )
    assert folded, "the history shows no evidence at all"
    assert all(folded), "an event's evidence is shown outside a closed <details>"
    summaries = browser.find_element(By.ID, "events").text
    assert "cause, error, overlap_risk, probe, probe_evidence" in summaries
    browser.save_screenshot(str(screenshots / "operation-evidence-folded.png"))

    raw.find_element(By.XPATH, "./ancestor::details/summary").click()
    assert raw.is_displayed()
    assert '"cause"' in raw.text


APPROVAL_INVOICE = "INV-8"


def _awaiting_capture(workdir: Path) -> ApprovedCaptures:
    """Ask for a capture that needs approval, in the served ledger: recorded, nothing sent."""
    ledger = open_ledger(workdir / "ledger.db")
    try:
        return awaiting_approval(ledger, APPROVAL_INVOICE)
    finally:
        ledger.close()


def _operator_approves(browser: Any, url: str, screenshots: Path) -> None:
    """What the operator does: find the request, read exactly what it sends, approve it for 2h."""
    op = approval_operation(APPROVAL_INVOICE)
    browser.get(url)
    _go(browser, browser.find_element(By.LINK_TEXT, "Needs approval"))
    assert browser.find_element(By.TAG_NAME, "h1").text == "Needs approval"
    listed = browser.find_element(By.ID, "approvals").text
    assert op in listed
    assert RUN_OPERATION not in listed, "a quarantined payment is not a request to approve"
    assert "payments.approved_capture v1" in listed
    assert "redacted" in listed
    assert "tok_secret" not in browser.page_source
    browser.save_screenshot(str(screenshots / "needs-approval.png"))

    _go(browser, browser.find_element(By.LINK_TEXT, op))
    assert browser.find_element(By.ID, "status").text == "AWAITING_APPROVAL"
    fingerprint = browser.find_element(By.ID, "fingerprint").text
    assert len(fingerprint) == 64
    form = browser.find_element(By.ID, "resolve")
    offered = [
        element.get_attribute("value")
        for element in form.find_elements(By.CSS_SELECTOR, "input[name=action]")
    ]
    assert offered == ["approve", "deny"]
    form.find_element(By.CSS_SELECTOR, "input[value=approve]").click()
    form.find_element(By.NAME, "reason").send_keys("the customer's manager signed the refund off")
    form.find_element(By.NAME, "evidence_reference").send_keys("TICKET-8")
    form.find_element(By.NAME, "expires_in").send_keys("2h")
    browser.save_screenshot(str(screenshots / "approve-form.png"))
    _go(browser, form.find_element(By.CSS_SELECTOR, "button[value=preview]"))

    assert "Nothing has been written" in browser.find_element(By.ID, "preview").text
    approving = browser.find_element(By.ID, "approving").text
    assert "You approve exactly this request" in approving
    assert fingerprint in approving
    assert "amount_cents" in approving
    assert "within 2h" in browser.find_element(By.ID, "expiry").text
    assert "PREPARED" in browser.find_element(By.ID, "changes").text
    browser.save_screenshot(str(screenshots / "approve-preview.png"))
    _go(browser, browser.find_element(By.CSS_SELECTOR, "#confirm-preview button[value=apply]"))

    assert browser.find_element(By.ID, "status").text == "PREPARED"
    assert "Recorded: approve" in browser.find_element(By.ID, "done").text
    browser.save_screenshot(str(screenshots / "approved.png"))
    _go(browser, browser.find_element(By.LINK_TEXT, "Needs approval"))
    assert browser.find_element(By.ID, "empty").text == "No request awaits approval."
    approved = browser.find_element(By.ID, "approved").text  # approved, not yet sent
    assert approval_operation(APPROVAL_INVOICE) in approved
    assert "alice" in approved
    browser.save_screenshot(str(screenshots / "approved-not-yet-sent.png"))


def test_an_operator_approves_a_held_capture_in_the_browser_and_the_next_call_sends_it_once(
    tmp_path: Path, browser: Any, screenshots: Path
):
    """Listed, read, previewed and approved in chromium; then exactly one capture, on the call."""
    waiting_run(tmp_path)
    captures = _awaiting_capture(tmp_path)
    server, url = _serve(tmp_path)
    try:
        _operator_approves(browser, url, screenshots)
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert captures.provider.committed() == 0, "an approval sends nothing by itself"

    ledger = open_ledger(tmp_path / "ledger.db")
    try:
        op = approval_operation(APPROVAL_INVOICE)
        approved = ledger.events(op)[-1].evidence
        assert approved["actor"] == "alice"
        assert approved["expires_at"] is not None
        first = captures.call(ledger, APPROVAL_INVOICE)
        again = captures.call(ledger, APPROVAL_INVOICE)
        record = ledger.get(op)
    finally:
        ledger.close()
    assert first == again
    assert record is not None
    assert record.status is EffectStatus.CONFIRMED
    assert captures.provider.committed() == 1


def test_at_phone_width_the_approvals_page_and_the_approve_form_fit(
    tmp_path: Path, browser: Any, screenshots: Path
):
    """At 390 px the list is one card per request and the approval form is on screen."""
    waiting_run(tmp_path)
    captures = _awaiting_capture(tmp_path)
    server, url = _serve(tmp_path)
    try:
        browser.get(url)
        _at_phone_width(browser)
        _go(browser, browser.find_element(By.LINK_TEXT, "Needs approval"))
        _assert_no_sideways_scroll(browser)
        assert approval_operation(APPROVAL_INVOICE) in browser.find_element(By.ID, "approvals").text
        _assert_on_screen(browser, "approvals")
        _save_whole_page(browser, screenshots / "needs-approval-phone.png")
        _go(browser, browser.find_element(By.LINK_TEXT, approval_operation(APPROVAL_INVOICE)))
        _assert_no_sideways_scroll(browser)
        for element_id in ("status", "fingerprint", "approving", "resolve"):
            _assert_on_screen(browser, element_id)
        _save_whole_page(browser, screenshots / "approve-form-phone.png")
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert _payment(tmp_path).status is EffectStatus.QUARANTINED
    assert captures.provider.committed() == 0
