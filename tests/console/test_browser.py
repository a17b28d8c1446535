"""The console in a real browser: Debian's chromium, driven by Selenium, against a real server.

The 3 a.m. path end to end: a run waits on a payment whose acknowledgement was
lost; ``agent-effect-ops serve`` (the installed console script, a real process
on a free port) shows it; the operator opens it, confirms it with a reason;
the ledger holds CONFIRMED with that actor and reason, the provider still
holds exactly one payment, and the run resumes to completion without a
second one.

A screenshot of each page is saved (``EFFECTGUARD_CONSOLE_SCREENSHOTS`` names
the directory; docs/console.md regenerates its pictures that way).
"""

from __future__ import annotations

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

from console_support import RUN_ID, RUN_OPERATION, open_runtime, waiting_run  # noqa: E402 - imported once the extra is known to be installed
from selenium import webdriver  # noqa: E402 - imported once the extra is known to be installed
from selenium.webdriver.chrome.service import Service  # noqa: E402 - imported once the extra is known to be installed
from selenium.webdriver.common.by import By  # noqa: E402 - imported once the extra is known to be installed

from effectguard import EffectStatus, open_ledger  # noqa: E402 - imported once the extra is known to be installed
from effectguard.runtime import RunState  # noqa: E402 - imported once the extra is known to be installed

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


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
    """Where this test saves a picture of each page it visits."""
    directory = Path(os.environ.get("EFFECTGUARD_CONSOLE_SCREENSHOTS") or tmp_path / "screenshots")
    directory.mkdir(parents=True, exist_ok=True)
    return directory


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
    table = browser.find_element(By.ID, "operations").text
    assert RUN_OPERATION in table
    assert "QUARANTINED" in table
    browser.save_screenshot(str(screenshots / "needs-attention.png"))

    browser.find_element(By.LINK_TEXT, "Waiting runs").click()
    runs = browser.find_element(By.ID, "runs").text
    assert RUN_ID in runs
    assert RUN_OPERATION in runs
    browser.save_screenshot(str(screenshots / "waiting-runs.png"))

    browser.find_element(By.LINK_TEXT, RUN_OPERATION).click()
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
    form.find_element(By.CSS_SELECTOR, "button[value=preview]").click()

    assert "Nothing has been written" in browser.find_element(By.ID, "preview").text
    assert "CONFIRMED" in browser.find_element(By.ID, "changes").text
    browser.save_screenshot(str(screenshots / "preview.png"))
    browser.find_element(By.CSS_SELECTOR, "#confirm-preview button[value=apply]").click()

    assert browser.find_element(By.ID, "status").text == "CONFIRMED"
    assert "Recorded: confirm" in browser.find_element(By.ID, "done").text
    browser.save_screenshot(str(screenshots / "confirmed.png"))


def test_an_operator_confirms_a_quarantined_payment_in_the_browser_and_the_run_resumes(
    tmp_path: Path, browser: Any, screenshots: Path
):
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
