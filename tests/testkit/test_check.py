"""``agent-effect check``: a user's own tool under faults, effects counted at the fake provider."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import check_tools
import pytest
from click.testing import CliRunner

from effectguard.cli.main import cli
from effectguard.testkit.checker import EPISODE_KINDS, load_check, run_check

ROOT = Path(__file__).resolve().parents[2]
TOOLS = "tests.testkit.check_tools"


@pytest.fixture(autouse=True)
def providers(monkeypatch):
    """Fresh fake providers for each test, shared with the tools the CLI imports by name."""
    # The CLI imports the tools as tests.testkit.check_tools: let that be this very module.
    monkeypatch.setitem(sys.modules, TOOLS, check_tools)
    return check_tools.reset()


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
        "6",
    )
    assert result.exit_code == 0, result.output
    assert data["held"] is True
    assert [e["fault"] for e in data["episodes"]] == [*EPISODE_KINDS, *EPISODE_KINDS]
    provider = providers["honest"]
    for episode in data["episodes"]:
        assert episode["effects"] == 1
        assert provider.committed(episode["idempotency_key"]) == 1
        assert episode["status"] == "CONFIRMED"
        assert not episode["duplicate"]
        assert not episode["lost_confirmation"]
    assert {c["claim"]: c["held"] for c in data["claims"]} == {
        "probe": True,
        "idempotency_guaranteed": True,
        "operation_id": True,
    }
    assert "HELD: 6/6 episodes held" in result.output


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
    assert all(provider.requests == 0 for provider in providers.values())


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


def test_the_same_seed_gives_the_same_receipt():
    """Episodes draw their arguments from the seed: two runs of one seed report the same ids."""
    subject = load_check(f"{TOOLS}:honest_capture", f"{TOOLS}:count_honest")
    first = run_check(subject, seed=5).to_json()
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
