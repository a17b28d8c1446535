"""``agent-effect-ops reprobe`` and ``reconcile`` through the installed console script.

Every test counts what the fake provider committed: a re-probe must never send.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from ops_helpers import protocol_snapshot
from recovery_support import AUDIT, OP, Site, leave_uncertain, make_site

from effectguard import EffectExecutor, EffectStatus, EventType, open_ledger, use_executor


@pytest.fixture
def site(tmp_path: Path, ledger_target: str) -> Site:
    """The tools module and provider state in this test's directory, over its ledger."""
    return make_site(tmp_path, ledger_target)


def _snapshot(site: Site) -> object:
    ledger = open_ledger(site.target)
    try:
        return protocol_snapshot(ledger)
    finally:
        ledger.close()


def _record(site: Site, operation_id: str = OP):
    ledger = open_ledger(site.target)
    try:
        return ledger.get(operation_id), ledger.events(operation_id), ledger.verify()
    finally:
        ledger.close()


def _uncertain(site: Site, **options: object) -> str:
    ledger = open_ledger(site.target)
    try:
        return leave_uncertain(site, ledger, **options)  # type: ignore[arg-type]
    finally:
        ledger.close()


def test_reprobe_confirms_a_quarantined_capture_the_provider_holds(site: Site) -> None:
    """COMMITTED evidence closes a quarantined operation; nothing is sent, a replay follows."""
    _uncertain(site)
    assert site.provider.committed() == 1

    done = site.ops("reprobe", OP, "--tools", "billing_tools")

    assert "QUARANTINED -> CONFIRMED" in done.stdout
    record, events, report = _record(site)
    assert record.status is EffectStatus.CONFIRMED
    assert record.provider_operation_id == "cap_000001"
    assert events[-1].type is EventType.CONFIRMED
    assert events[-1].evidence["probe"] == "COMMITTED"
    assert "reprobe as" in events[-1].evidence["reprobed_by"]
    assert "uid" in events[-1].evidence["os_user"]
    assert events[-1].evidence["host"]
    assert report.ok
    assert site.provider.committed() == 1
    # The agent's next call replays the probe's output: still one capture.
    module = site.module()
    ledger = open_ledger(site.target)
    try:
        with use_executor(EffectExecutor(ledger)):
            again = module.capture.execute("INV-9", 1250)
    finally:
        ledger.close()
    assert again.replayed
    assert again.output["id"] == "cap_000001"
    assert site.provider.committed() == 1


def test_reprobe_dry_run_probes_but_writes_nothing(site: Site) -> None:
    """--dry-run says what the evidence would do and leaves the ledger exactly as it was."""
    _uncertain(site)
    before = _snapshot(site)

    done = site.ops("reprobe", OP, "--tools", "billing_tools", "--dry-run")

    assert "dry run" in done.stdout
    assert "QUARANTINED -> CONFIRMED" in done.stdout
    assert _snapshot(site) == before
    assert site.provider.committed() == 1


def test_a_quarantined_operation_stays_for_a_person_unless_committed(site: Site) -> None:
    """NOT_COMMITTED is recorded as evidence but never reopens a quarantined operation."""
    _uncertain(site, committed=False)

    done = site.ops_json("reprobe", OP, "--tools", "billing_tools")

    assert (done["before"], done["after"], done["probe"]) == (
        "QUARANTINED",
        "QUARANTINED",
        "NOT_COMMITTED",
    )
    record, events, report = _record(site)
    assert record.status is EffectStatus.QUARANTINED
    assert events[-1].type is EventType.REPROBED
    assert events[-1].evidence["probe"] == "NOT_COMMITTED"
    assert report.ok
    assert site.provider.committed() == 0  # the tools' provider has no faults now: a send commits


def test_not_committed_makes_an_unknown_operation_dispatchable_by_its_next_call(
    site: Site,
) -> None:
    """Authoritative NOT_COMMITTED without overlap: PREPARED, and the next call sends it once."""
    operation_id = _uncertain(site, committed=False, tool="capture_later")

    done = site.ops_json("reprobe", operation_id, "--tools", "billing_tools")

    assert (done["before"], done["after"], done["action"]) == (
        "OUTCOME_UNKNOWN",
        "PREPARED",
        "retry_ready",
    )
    assert site.provider.committed() == 0
    module = site.module()
    ledger = open_ledger(site.target)
    try:
        with use_executor(EffectExecutor(ledger)):
            sent = module.capture_later.execute("INV-9", 1250)
    finally:
        ledger.close()
    assert sent.status is EffectStatus.CONFIRMED
    assert not sent.replayed
    assert site.provider.committed() == 1


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("reprobe", OP), 2, "--tools"),
        (("reprobe", "invoice:nope", "--tools", "billing_tools"), 1, "no operation"),
        (("reprobe", OP, "--tools", "no_such_tools"), 1, "cannot import tools module"),
        (("reprobe", OP, "--tools", "json"), 1, "holds no @effect tool"),
        (("reconcile", "--tools", "billing_tools", "--status", "confirmed"), 1, "not CONFIRMED"),
        (("reconcile", "--tools", "billing_tools", "--status", "bogus"), 2, "bogus"),
    ],
)
def test_bad_requests_are_one_line_and_change_nothing(
    site: Site, args: tuple[str, ...], code: int, message: str
) -> None:
    """Each refusal is one line with the documented exit code; the ledger is unchanged."""
    _uncertain(site)
    before = _snapshot(site)

    done = site.ops(*args, code=code)

    assert message in done.stderr
    assert _snapshot(site) == before
    assert site.provider.committed() == 1


def test_a_settled_operation_is_not_probed(site: Site) -> None:
    """Reprobing a CONFIRMED operation is refused (exit 1) and writes nothing."""
    _uncertain(site)
    site.ops(
        "confirm",
        OP,
        "--output-json",
        '{"id": "cap_000001"}',
        "--provider-operation-id",
        "cap_000001",
        *AUDIT,
    )
    before = _snapshot(site)

    done = site.ops("reprobe", OP, "--tools", "billing_tools", code=1)

    assert "is CONFIRMED" in done.stderr
    assert _snapshot(site) == before


def test_reconcile_sweeps_every_uncertain_operation_and_never_sends(site: Site) -> None:
    """One sweep: committed -> CONFIRMED, unknown and absent -> PREPARED, the rest stay."""
    committed = _uncertain(site, invoice="INV-1")
    absent = _uncertain(site, committed=False, invoice="INV-2")
    later = _uncertain(site, committed=False, tool="capture_later", invoice="INV-3")
    no_probe = _uncertain(site, tool="refund", invoice="INV-4")
    assert site.provider.committed() == 2  # INV-1 and the refund INV-4 reached the provider

    report = site.ops_json("reconcile", "--tools", "billing_tools")

    after = {item["operation_id"]: item["after"] for item in report["probed"]}
    assert after == {committed: "CONFIRMED", absent: "QUARANTINED", later: "PREPARED"}
    assert report["changed"] == 2
    assert [item["operation_id"] for item in report["skipped"]] == [no_probe]
    assert "no outcome probe" in report["skipped"][0]["reason"]
    assert site.provider.committed() == 2  # probes only: a send would have committed
    ledger = open_ledger(site.target)
    try:
        statuses = {op: ledger.get(op).status.value for op in (committed, absent, later, no_probe)}
        assert ledger.verify().ok
    finally:
        ledger.close()
    assert statuses == {
        committed: "CONFIRMED",
        absent: "QUARANTINED",
        later: "PREPARED",
        no_probe: "QUARANTINED",
    }


def test_reconcile_text_table_and_limit(site: Site) -> None:
    """The text view is a table and a summary; --limit bounds how many are probed."""
    _uncertain(site, invoice="INV-1")
    _uncertain(site, invoice="INV-2")

    done = site.ops("reconcile", "--tools", "billing_tools", "--limit", "1")

    assert done.stdout.splitlines()[0].split()[:3] == ["OPERATION", "BEFORE", "AFTER"]
    assert "probed 1, changed 1, skipped 0" in done.stdout
    ledger = open_ledger(site.target)
    try:
        left = ledger.list_operations(status=EffectStatus.QUARANTINED)
    finally:
        ledger.close()
    assert len(left) == 1


def test_reconcile_watch_sweeps_again_backing_off_per_operation(site: Site) -> None:
    """--watch keeps sweeping; an operation left as it was is deferred by its backoff."""
    _uncertain(site, committed=False)
    script = Path(sys.executable).parent / "agent-effect-ops"
    watcher = subprocess.Popen(
        [
            str(script),
            "--db",
            site.target,
            "reconcile",
            "--tools",
            "billing_tools",
            "--watch",
            "0.1",
        ],
        cwd=site.directory,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    summaries: list[str] = []
    try:
        assert watcher.stdout is not None
        for line in watcher.stdout:
            if line.startswith("probed "):
                summaries.append(line.strip())
            if len(summaries) == 2:
                break
    finally:
        watcher.terminate()
        watcher.wait(30)

    backing_off = "(each waits out its backoff: run it again later, or reprobe OP)"
    assert summaries == [
        "probed 1, changed 0, skipped 0, deferred 0",
        f"probed 0, changed 0, skipped 0, deferred 1 {backing_off}",
    ]
    assert site.provider.committed() == 0
