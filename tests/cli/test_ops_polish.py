"""Small things an operator meets: every missing option named at once; skips reported once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ops_helpers import quarantined_file
from recovery_support import TOOLS_MODULE, leave_uncertain, make_site

from effectguard import open_ledger

ROOT = Path(__file__).resolve().parents[2]


def _ops(*args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "agent-effect-ops"
    return subprocess.run(
        [str(script), *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_every_missing_required_option_is_named_in_one_error(tmp_path: Path) -> None:
    """A confirm missing its options names them in one line, exit 2, ledger untouched."""
    ledger = quarantined_file(tmp_path)
    before = ledger.read_bytes()
    confirm = ("--db", str(ledger), "confirm", "invoice:INV-1042:capture", "--actor", "alice")

    done = _ops(*confirm)

    assert done.returncode == 2
    expected = (
        "Error: Missing options '--reason', '--evidence-reference' "
        "(see 'agent-effect-ops confirm --help')"
    )
    assert done.stderr.splitlines() == [expected]
    # The output is typed, or taken from the probe: either way, the line says both ways.
    done = _ops(*confirm, "--reason", "r", "--evidence-reference", "T-1", "--output-json", "{}")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "Error: confirm needs --output-json and --provider-operation-id, or --from-probe"
    ]
    assert ledger.read_bytes() == before


def test_one_missing_option_keeps_clicks_wording(tmp_path: Path) -> None:
    """With a single option missing the error is Click's own, still one line."""
    ledger = quarantined_file(tmp_path)

    done = _ops(
        "--db", str(ledger), "reject", "invoice:INV-1042:capture", "--actor", "a", "--reason", "r"
    )

    assert done.returncode == 2
    assert done.stderr.startswith("Error: Missing option '--evidence-reference'")


def test_postgres_skips_are_one_line_of_the_summary() -> None:
    """Without a PostgreSQL server, ``-ra`` reports the skipped PostgreSQL tests once."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in {
            "EFFECTGUARD_TEST_POSTGRES_URL",
            "EFFECTGUARD_REQUIRE_POSTGRES",
            "EFFECTGUARD_REQUIRE_EXTRAS",
        }
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-ra",
            "-q",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
            "tests/ledger/test_resolution.py",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )

    skipped = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(skipped) == 1, done.stdout[-3000:]
    count = int(skipped[0].split("[", 1)[1].split("]", 1)[0])
    assert count > 1  # many tests, one line
    assert "PostgreSQL tests skipped" in skipped[0]


def test_events_fit_the_terminal_and_wide_shows_everything(tmp_path: Path) -> None:
    """With COLUMNS=80 no line is longer; --wide keeps the whole evidence."""
    ledger = quarantined_file(tmp_path)
    script = Path(sys.executable).parent / "agent-effect-ops"
    args = [str(script), "--db", str(ledger), "events", "invoice:INV-1042:capture"]
    env = {**os.environ, "COLUMNS": "80"}

    fitted = subprocess.run(args, capture_output=True, text=True, timeout=60, check=True, env=env)
    wide = subprocess.run(
        [*args, "--wide"], capture_output=True, text=True, timeout=60, check=True, env=env
    )

    lines = fitted.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert any(line.endswith("\u2026") for line in lines)
    assert max(len(line) for line in wide.stdout.splitlines()) > 80
    assert '"probe":null' in wide.stdout
    assert '"probe":null' not in fitted.stdout


def test_list_status_all_lists_every_status_as_runs_list_does(tmp_path: Path) -> None:
    """`list --status all` (any case) is no filter, where it used to be refused."""
    ledger = quarantined_file(tmp_path)

    every = _ops("--db", str(ledger), "list", "--json")
    for spelling in ("all", "ALL"):
        done = _ops("--db", str(ledger), "list", "--status", spelling, "--json")
        assert done.returncode == 0, done.stderr
        assert done.stdout == every.stdout
    assert "invoice:INV-1042:capture" in every.stdout


def test_reconcile_that_probes_nothing_says_why(tmp_path: Path) -> None:
    """'probed 0' comes with the reason and the next step, not alone."""
    site = make_site(tmp_path, str(tmp_path / "ledger.db"))
    ledger = open_ledger(site.target)
    try:
        leave_uncertain(site, ledger)  # QUARANTINED: not among the statuses asked for below
    finally:
        ledger.close()

    done = site.ops("reconcile", "--tools", TOOLS_MODULE, "--status", "outcome-unknown")

    last = done.stdout.splitlines()[-1]
    assert last.startswith("probed 0, changed 0, skipped 0, deferred 0 (nothing to probe")
    assert "`list --status all` shows what the ledger holds" in last
