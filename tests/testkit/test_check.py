"""``agent-effect check``: a user's own tool under faults, effects counted at the fake provider."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from effectguard.cli.main import cli
from effectguard.testkit.checker import EPISODE_KINDS, PROCESS_KINDS, load_check, run_check
from tests.testkit import check_tools

ROOT = Path(__file__).resolve().parents[2]
TOOLS = "tests.testkit.check_tools"


@pytest.fixture(autouse=True)
def providers(monkeypatch, tmp_path):
    """Fresh fake providers for each test, shared with the tools the CLI imports by name.

    They live in files, so the checker's child processes commit to the very providers
    this test counts.
    """
    # The CLI imports the tools as tests.testkit.check_tools: let that be this very module.
    monkeypatch.setitem(sys.modules, TOOLS, check_tools)
    shared = tmp_path / "providers"
    shared.mkdir()
    monkeypatch.setenv("EFFECTGUARD_CHECK_TOOLS_DIR", str(shared))
    monkeypatch.chdir(ROOT)  # the children import tests.testkit.check_tools from here
    yield check_tools.reset()
    monkeypatch.delenv("EFFECTGUARD_CHECK_TOOLS_DIR", raising=False)
    check_tools.reset()


def check(*arguments: str):
    return CliRunner().invoke(cli, ["check", *arguments])


def receipt(tmp_path: Path, *arguments: str):
    output = tmp_path / "receipt.json"
    result = check(*arguments, "--json", str(output))
    return result, json.loads(output.read_text(encoding="utf-8"))


def test_an_honest_tool_holds_with_one_effect_per_episode_counted_at_the_provider(
    tmp_path, providers
):
    """Every episode of a truthful contract leaves exactly one capture at the provider; exit 0."""
    result, data = receipt(
        tmp_path,
        f"{TOOLS}:honest_capture",
        "--counter",
        f"{TOOLS}:count_honest",
        "--episodes",
        str(2 * len(EPISODE_KINDS)),
    )
    assert result.exit_code == 0, result.output
    assert data["held"] is True
    faults = [e["fault"] for e in data["episodes"]]
    assert faults == [*EPISODE_KINDS, *EPISODE_KINDS, *PROCESS_KINDS]
    provider = providers["honest"]
    for episode in data["episodes"]:
        assert episode["judged"], episode
        assert episode["effects"] == 1, str(episode)
        assert provider.committed(episode["idempotency_key"]) == 1
        assert episode["status"] == "CONFIRMED"
        assert not episode["duplicate"]
        assert not episode["lost_confirmation"]
    assert {c["claim"]: c["held"] for c in data["claims"]} == {
        "probe": True,
        "idempotency_guaranteed": True,
        "operation_id": True,
    }
    assert f"HELD: {len(faults)}/{len(faults)} episodes held" in result.output


def test_a_lying_probe_is_named_and_its_duplicate_counted(tmp_path, providers):
    """A probe answering NOT_COMMITTED for a landed capture: a broken claim, a duplicate; exit 1."""
    result, data = receipt(
        tmp_path, f"{TOOLS}:lying_probe_capture", "--counter", f"{TOOLS}:count_no_dedup"
    )
    assert result.exit_code == 1, result.output
    probe = next(c for c in data["claims"] if c["claim"] == "probe")
    assert probe["held"] is False
    assert "NOT_COMMITTED" in probe["evidence"]
    lost_ack = data["episodes"][0]
    assert lost_ack["fault"] == "lost-ack"
    assert lost_ack["duplicate"] is True
    assert providers["no_dedup"].committed(lost_ack["idempotency_key"]) == 2
    assert "claim probe: BROKEN" in result.output


def test_a_false_idempotency_claim_is_caught(tmp_path, providers):
    """idempotency_guaranteed=True on a provider that commits a resend is a broken claim; exit 1."""
    result, data = receipt(
        tmp_path, f"{TOOLS}:false_idempotency_capture", "--counter", f"{TOOLS}:count_no_dedup"
    )
    assert result.exit_code == 1, result.output
    claim = next(c for c in data["claims"] if c["claim"] == "idempotency_guaranteed")
    assert claim["held"] is False
    assert "left 2 effect(s)" in claim["evidence"]
    assert all(e["effects"] == 1 for e in data["episodes"])


def test_an_operation_id_template_collision_is_caught(tmp_path):
    """Two amounts on one invoice sharing one operation id: a broken claim naming the argument."""
    arguments = [f"{TOOLS}:colliding_capture", "--counter", f"{TOOLS}:count_honest"]
    result, data = receipt(tmp_path, *arguments)
    assert result.exit_code == 1, result.output
    claim = next(c for c in data["claims"] if c["claim"] == "operation_id")
    assert claim["held"] is False
    assert "amount_cents" in claim["evidence"]
    accepted = check(*arguments, "--same-request", "amount_cents")
    assert accepted.exit_code == 0, accepted.output


def test_without_a_counter_the_report_says_so_and_counts_handler_returns(tmp_path, providers):
    """No --counter: the receipt names the handler's returns as its count; idempotency unchecked."""
    result, data = receipt(tmp_path, f"{TOOLS}:honest_capture")
    assert result.exit_code == 0, result.output
    assert "no --counter" in result.output
    assert data["counter"] is None
    assert "handler's returns" in data["counted_by"]
    claim = next(c for c in data["claims"] if c["claim"] == "idempotency_guaranteed")
    assert claim["held"] is None
    for episode in data["episodes"]:
        assert episode["effects"] == 1
        assert providers["honest"].committed(episode["idempotency_key"]) == 1


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ([f"{TOOLS}:plain_function"], "is not an @effect tool"),
        ([f"{TOOLS}:no_probe_capture"], "has no probe"),
        (["no_such_module_xyz:tool"], "cannot import no_such_module_xyz"),
        ([f"{TOOLS}:missing"], "has no missing"),
        (["no-colon"], "is not MODULE:FUNCTION"),
        ([f"{TOOLS}:unannotated_capture"], "cannot draw a value for parameter 'blob'"),
        (
            [f"{TOOLS}:broken_id_capture"],
            "its operation id cannot be made here: TypeError",
        ),
        (
            [f"{TOOLS}:honest_capture", "--counter", f"{TOOLS}:raising_counter"],
            "raised RuntimeError: sandbox is down",
        ),
        (
            [f"{TOOLS}:honest_capture", "--counter", f"{TOOLS}:NOT_CALLABLE"],
            "is not callable",
        ),
        (
            [f"{TOOLS}:honest_capture", "--same-request", "nope"],
            "--same-request names no parameter",
        ),
        (
            [f"{TOOLS}:honest_capture", "--sandbox-url-env", "EFFECTGUARD_CHECK_NO_SUCH_VAR"],
            "the variable is not set",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2_and_sends_nothing(arguments, message, providers, tmp_path):
    """A tool or counter that cannot be checked: one line, exit 2, no request at any provider."""
    output = tmp_path / "receipt.json"
    result = check(*arguments, "--json", str(output))
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not output.exists()
    assert all(provider.attempts() == 0 for provider in providers.values())


def test_an_existing_json_file_is_refused_without_force(tmp_path):
    """--json never overwrites a file unless --force; with it the receipt replaces the file."""
    output = tmp_path / "receipt.json"
    output.write_text("keep", encoding="utf-8")
    arguments = [f"{TOOLS}:honest_capture", "--json", str(output)]
    refused = check(*arguments)
    assert refused.exit_code == 2
    assert "already exists" in refused.output
    assert output.read_text(encoding="utf-8") == "keep"
    forced = check(*arguments, "--force")
    assert forced.exit_code == 0, forced.output
    assert json.loads(output.read_text(encoding="utf-8"))["held"] is True


def test_the_same_seed_gives_the_same_receipt(monkeypatch, tmp_path):
    """Episodes draw their arguments from the seed: two runs of one seed report the same ids."""
    subject = load_check(f"{TOOLS}:honest_capture", f"{TOOLS}:count_honest")
    first = run_check(subject, seed=5).to_json()
    (tmp_path / "again").mkdir()
    monkeypatch.setenv("EFFECTGUARD_CHECK_TOOLS_DIR", str(tmp_path / "again"))
    check_tools.reset()
    assert run_check(subject, seed=5).to_json() == first


def test_a_real_process_reports_a_broken_contract_with_exit_1():
    """The installed command, run from the project directory, imports the tool and exits 1."""
    completed = subprocess.run(
        [
            sys.executable,
            "-c",
            "from effectguard.cli.main import main; main()",
            "check",
            f"{TOOLS}:false_idempotency_capture",
            "--counter",
            f"{TOOLS}:count_no_dedup",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 1, completed.stderr
    assert "claim idempotency_guaranteed: BROKEN" in completed.stdout


def by_fault(data):
    return {e["fault"]: e for e in data["episodes"]}


def test_a_sigkill_after_the_send_is_recovered_once_by_an_honest_contract(tmp_path, providers):
    """A child really killed after its capture committed: recovery confirms it, never resends."""
    result, data = receipt(
        tmp_path,
        f"{TOOLS}:honest_capture",
        "--counter",
        f"{TOOLS}:count_honest",
        "--episodes",
        "1",
    )
    assert result.exit_code == 0, result.output
    episodes = by_fault(data)
    assert set(PROCESS_KINDS) <= set(episodes)
    for fault in PROCESS_KINDS:
        episode = episodes[fault]
        assert episode["judged"], episode
        assert providers["honest"].committed(episode["idempotency_key"]) == 1
        assert providers["honest"].attempts(episode["idempotency_key"]) >= 1
        assert episode["status"] == "CONFIRMED"


def test_a_lying_probe_doubles_a_capture_after_a_sigkill_and_under_a_dead_ledger(
    tmp_path, providers
):
    """Killed after the send, or its outcome unrecordable: the lying probe's resend is counted."""
    result, data = receipt(
        tmp_path,
        f"{TOOLS}:lying_probe_capture",
        "--counter",
        f"{TOOLS}:count_no_dedup",
        "--processes",
        "3",
    )
    assert result.exit_code == 1, result.output
    episodes = by_fault(data)
    for fault in ("kill-after-send", "ledger-down-at-outcome"):
        episode = episodes[fault]
        assert episode["duplicate"] is True, episode
        assert providers["no_dedup"].committed(episode["idempotency_key"]) == 2
    # No send before a recorded claim: the ledger refusing the claim costs nothing.
    claim = episodes["ledger-down-at-claim"]
    assert providers["no_dedup"].committed(claim["idempotency_key"]) == 1
    assert claim["note"] == ""
    # Two real processes racing on one operation: the lease lets one of them send.
    race = episodes["race"]
    assert race["judged"] is True
    assert race["note"] == ""  # the two processes overlapped: neither replayed the other
    assert providers["no_dedup"].committed(race["idempotency_key"]) == 1


def test_an_in_memory_provider_leaves_the_process_episodes_unjudged_and_says_why(
    tmp_path, providers, monkeypatch
):
    """A counter blind to a child's effect: the episode is not judged, and the note says why."""
    monkeypatch.delenv("EFFECTGUARD_CHECK_TOOLS_DIR")
    check_tools.reset()
    result, data = receipt(
        tmp_path, f"{TOOLS}:honest_capture", "--counter", f"{TOOLS}:count_honest"
    )
    assert result.exit_code == 0, result.output
    after_send = by_fault(data)["kill-after-send"]
    assert after_send["judged"] is False
    assert "not shared between processes" in after_send["note"]
    assert "not judged" in data["summary"]


def test_a_child_that_cannot_import_the_tool_is_reported_not_judged(tmp_path, monkeypatch):
    """The tool imports here but not in a fresh interpreter: the episodes say what failed."""
    from effectguard.testkit.checker import subject_of  # noqa: PLC0415 - the test's subject

    subject = subject_of(
        check_tools.honest_capture, check_tools.count_honest, spec="no_such_module_xyz:tool"
    )
    report = run_check(subject, episodes=0, processes=1)
    (episode,) = report.episodes
    assert episode.judged is False
    assert "ModuleNotFoundError" in episode.note or "cannot import" in episode.note


def test_the_html_receipt_is_self_contained_and_escapes_what_it_shows(tmp_path, providers):
    """--html: one page, no script or external asset, the evidence escaped, the command there."""
    output = tmp_path / "receipt.html"
    arguments = [f"{TOOLS}:lying_probe_capture", "--counter", f"{TOOLS}:count_no_dedup"]
    result = check(*arguments, "--html", str(output), "--seed", "3", "--processes", "1")
    assert result.exit_code == 1, result.output
    page = output.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page
    assert "http://" not in page
    assert "https://" not in page
    assert "src=" not in page
    assert "the probe answered NOT_COMMITTED for key &#x27;capture:" in page
    assert (
        "agent-effect check tests.testkit.check_tools:lying_probe_capture --counter "
        "tests.testkit.check_tools:count_no_dedup --episodes 5 --processes 1 --seed 3" in page
    )
    for fault in [*EPISODE_KINDS, "kill-before-send"]:
        assert f"<td>{fault}</td>" in page
    refused = check(*arguments, "--html", str(output))
    assert refused.exit_code == 2
    assert "already exists" in refused.output
    assert output.read_text(encoding="utf-8") == page


def test_html_escapes_a_hostile_tool_name():
    """Text from the report never becomes markup."""
    from effectguard.testkit.checker import CheckReport, ClaimCheck  # noqa: PLC0415 - the test's subject
    from effectguard.testkit.receipt import render_html  # noqa: PLC0415 - the test's subject

    report = CheckReport(
        tool="<script>alert(1)</script>",
        counter=None,
        counted_by="x",
        seed=0,
        episodes=(),
        claims=(ClaimCheck("probe", held=False, evidence='"><img src=x>'),),
    )
    page = render_html(report)
    assert "<script>" not in page
    assert "<img" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_a_tool_that_misses_the_proxy_is_told_so(tmp_path, monkeypatch):
    """--sandbox-url-env naming a URL the tool never calls: the lost-ack episode says so."""
    monkeypatch.setenv("EFFECTGUARD_CHECK_UNUSED_URL", "http://127.0.0.1:9")
    result, data = receipt(
        tmp_path,
        f"{TOOLS}:honest_capture",
        "--counter",
        f"{TOOLS}:count_honest",
        "--sandbox-url-env",
        "EFFECTGUARD_CHECK_UNUSED_URL",
        "--processes",
        "0",
    )
    assert result.exit_code == 0, result.output
    assert "never went through the proxy" in data["episodes"][0]["note"]
    assert "--sandbox-url-env EFFECTGUARD_CHECK_UNUSED_URL" in data["command"]


def test_a_counter_that_fails_mid_check_stops_it_in_one_line(tmp_path):
    """The counter raising once effects exist: one line naming it and the operation, exit 2."""
    output = tmp_path / "receipt.json"
    result = check(
        f"{TOOLS}:honest_capture",
        "--counter",
        f"{TOOLS}:counter_failing_later",
        "--json",
        str(output),
    )
    assert result.exit_code == 2, result.output
    assert "raised ConnectionError: sandbox went away while counting operation" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not output.exists()


def test_an_async_tool_is_checked_on_one_event_loop_with_its_async_probe_and_counter(
    tmp_path, providers
):
    """An async tool, probe and counter: every episode holds with one capture each.

    In this process and in killed children alike; its client, bound to one loop,
    works throughout.
    """
    result, data = receipt(
        tmp_path,
        f"{TOOLS}:async_honest_capture",
        "--counter",
        f"{TOOLS}:async_count_honest",
        "--episodes",
        str(len(EPISODE_KINDS)),
    )
    assert result.exit_code == 0, result.output
    faults = [e["fault"] for e in data["episodes"]]
    assert faults == [*EPISODE_KINDS, *PROCESS_KINDS]
    for episode in data["episodes"]:
        assert episode["judged"], episode
        assert episode["status"] == "CONFIRMED", episode
        assert providers["honest"].committed(episode["idempotency_key"]) == 1, episode
    assert {c["claim"]: c["held"] for c in data["claims"]} == {
        "probe": True,
        "idempotency_guaranteed": True,
        "operation_id": True,
    }


def test_an_async_tool_whose_probe_lies_is_named_and_its_duplicate_counted(tmp_path, providers):
    """The async twin of the lying probe: exit 1, the claim broken, a second capture counted."""
    result, data = receipt(
        tmp_path,
        f"{TOOLS}:async_lying_probe_capture",
        "--counter",
        f"{TOOLS}:count_no_dedup",
        "--episodes",
        str(len(EPISODE_KINDS)),
    )
    assert result.exit_code == 1, result.output
    claims = {c["claim"]: c for c in data["claims"]}
    assert claims["probe"]["held"] is False
    assert "NOT_COMMITTED" in claims["probe"]["evidence"]
    lost = by_fault(data)["lost-ack"]
    assert lost["duplicate"] is True
    assert providers["no_dedup"].committed(lost["idempotency_key"]) == 2


@pytest.mark.parametrize("tool", ["scoped_capture", "async_scoped_capture"])
def test_a_tool_identified_by_its_call_scope_is_checked_in_a_scope_per_episode(
    tmp_path, providers, tool
):
    """{run_id}/{call_id} ids: each episode is one tool call, retried within its own scope.

    One capture per episode, in this process and in the killed or racing children.
    """
    result, data = receipt(
        tmp_path,
        f"{TOOLS}:{tool}",
        "--counter",
        f"{TOOLS}:count_honest",
        "--episodes",
        str(len(EPISODE_KINDS)),
    )
    assert result.exit_code == 0, result.output
    ids = [e["operation_id"] for e in data["episodes"]]
    assert all(i.startswith("capture:effectguard-check:") for i in ids), ids
    assert len(set(ids)) == len(ids)
    for episode in data["episodes"]:
        assert episode["judged"], episode
        assert episode["status"] == "CONFIRMED", episode
        assert providers["honest"].committed(episode["idempotency_key"]) == 1, episode
    claims = {c["claim"]: c for c in data["claims"]}
    assert claims["operation_id"]["held"] is True


def test_a_run_scoped_id_that_leaves_out_an_argument_is_caught(tmp_path, providers):
    """Two tool calls of one run with other amounts share an operation id: the claim is broken."""
    result, data = receipt(
        tmp_path, f"{TOOLS}:run_scoped_capture", "--counter", f"{TOOLS}:count_honest"
    )
    assert result.exit_code == 1, result.output
    claims = {c["claim"]: c for c in data["claims"]}
    assert claims["operation_id"]["held"] is False
    assert "amount_cents=" in claims["operation_id"]["evidence"]
