"""``agent-effect-ops serve`` through the installed console script: a real server process."""

from __future__ import annotations

import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from extras_support import import_extra

import_extra("starlette", "console")

from console_support import quarantine, sqlite_state  # noqa: E402 - imported once the extra is known to be installed

from effectguard import open_ledger  # noqa: E402 - imported once the extra is known to be installed

SCRIPT = shutil.which("agent-effect-ops", path=str(Path(sys.executable).parent))


def _ops(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    assert SCRIPT is not None, "the agent-effect-ops console script is not installed"
    return subprocess.run(
        [SCRIPT, *args], capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture
def ledger_file(tmp_path: Path) -> Path:
    path = tmp_path / "ledger.db"
    ledger = open_ledger(path)
    try:
        quarantine(ledger, "A1")
    finally:
        ledger.close()
    return path


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["serve", "--host", "0.0.0.0"], "refusing to serve on 0.0.0.0"),  # noqa: S104 - the refused case
        (["serve", "--host", "192.0.2.7", "--allow-remote", "--tls-cert", "ledger.db"], "together"),
        (["serve", "--port", "70000"], "70000"),
    ],
)
def test_bad_serve_options_are_one_line_errors_and_touch_nothing(
    ledger_file: Path, args: list[str], says: str
):
    before = sqlite_state(ledger_file)
    args = [a if a != "ledger.db" else str(ledger_file) for a in args]
    result = _ops("--db", str(ledger_file), *args)
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert says in lines[0]
    assert sqlite_state(ledger_file) == before


def test_serve_without_a_ledger_names_what_is_missing(tmp_path: Path):
    missing = _ops("serve")
    assert missing.returncode == 2
    assert "--db" in missing.stderr
    directory = _ops("--db", str(tmp_path), "serve")
    assert directory.returncode == 1
    assert "is a directory" in directory.stderr
    assert len(directory.stderr.strip().splitlines()) == 1


def test_a_read_only_server_answers_with_the_token_and_serves_no_write_route(ledger_file: Path):
    before = sqlite_state(ledger_file)
    assert SCRIPT is not None
    server = subprocess.Popen(
        [SCRIPT, "--db", str(ledger_file), "serve", "--port", "0", "--read-only"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        banner = server.stdout.readline()
        assert "read-only" in banner
        url = server.stdout.readline().split(" ", 1)[1].strip()
        base, token = url.split("/?token=")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{base}/", timeout=10)  # noqa: S310 - a local http URL
        assert refused.value.code == 403
        cookie = {"Cookie": f"effectguard_console={token}"}
        request = urllib.request.Request(f"{base}/", headers=cookie)  # noqa: S310 - a local http URL
        with urllib.request.urlopen(request, timeout=10) as page:  # noqa: S310 - a local http URL
            assert "invoice:A1:capture" in page.read().decode()
            assert page.headers["X-Frame-Options"] == "DENY"
        post = urllib.request.Request(  # noqa: S310 - a local http URL
            f"{base}/resolve",
            data=b"action=reject&operation_id=invoice%3AA1%3Acapture",
            headers={"Cookie": f"effectguard_console={token}"},
        )
        with pytest.raises(urllib.error.HTTPError) as write:
            urllib.request.urlopen(post, timeout=10)  # noqa: S310 - a local http URL
        assert write.value.code in (404, 405)
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert sqlite_state(ledger_file) == before


def test_without_the_extra_the_import_error_names_it():
    code = (
        "import sys; sys.modules['starlette'] = None\n"
        "try:\n    import effectguard.console\n"
        "except ImportError as e:\n    print(str(e))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert "pip install 'effectguard[console]'" in result.stdout
