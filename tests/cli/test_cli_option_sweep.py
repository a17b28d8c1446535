"""Every option of both CLIs against hostile values: one line, a documented exit, nothing changed.

Each value-taking option of ``agent-effect-ops`` (``serve`` aside: its valid
values start a server) and ``agent-effect`` is given, in an otherwise valid
command line, an out-of-range number, NaN, a 5,000-character string, a NUL
byte and paths that cannot be read or written. Whatever the outcome (a
usage error, a refusal, or a value that is simply valid), the process never
ends in a traceback, prints at most one error line, exits 0, 1 or 2, and
leaves the ledger byte for byte as it was: the writes are dry runs, and a
refused write writes nothing.
"""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from ops_helpers import AUDIT, OP, file_state, quarantined_file

from effectguard.cli.main import cli as agent_effect
from effectguard.cli.ops import main as ops

CONFIRM = ("--output-json", '{"id": "cap_1"}', "--provider-operation-id", "cap_1")

#: Each command with arguments that make it succeed (and write nothing) on a quarantined OP.
BASES: dict[str, tuple[str, ...]] = {
    "list": ("list", "--limit", "5"),
    "show": ("show", OP),
    "events": ("events", OP),
    "verify": ("verify",),
    "confirm": ("confirm", OP, *CONFIRM, *AUDIT, "--dry-run"),
    "reject": ("reject", OP, *AUDIT, "--dry-run"),
    "authorize-retry": ("authorize-retry", OP, *AUDIT, "--dry-run"),
    # A quarantined OP awaits no approval: these end refused (exit 1), after every option is read.
    "approve": ("approve", OP, *AUDIT, "--expires-in", "1h", "--dry-run"),
    "deny": ("deny", OP, *AUDIT, "--dry-run"),
    "reprobe": ("reprobe", OP, "--dry-run"),
    "reconcile": ("reconcile", "--dry-run"),
    "export": ("export",),
    "keygen": ("keygen", "--private-key", "{tmp}/key.pem", "--public-key", "{tmp}/key.pub"),
    "prune": ("prune", "--older-than", "30d", "--dry-run"),
    "runs list": ("runs", "list", "--checkpoints", "{tmp}/checkpoints.db"),
    "runs show": ("runs", "show", "run-1", "--checkpoints", "{tmp}/checkpoints.db"),
}

HOSTILE = {
    "huge number": "9" * 30,
    "negative": "-1",
    "nan": "nan",
    "infinity": "inf",
    "huge string": "x" * 5000,
    "nul byte": "a\x00b",
    "path in a missing directory": "{tmp}/missing/dir/file",
    "a directory": "{tmp}",
    "a name too long": "{tmp}/" + "n" * 300,
}


def _value_options(command: click.Command) -> list[click.Option]:
    return [
        param
        for param in command.params
        if isinstance(param, click.Option) and not param.is_flag and param.expose_value
    ]


def _ops_cases() -> list[tuple[str, str, str]]:
    cases = []
    for name in BASES:
        command: click.Command = ops
        for word in name.split():
            assert isinstance(command, click.Group)
            command = command.commands[word]
        options = [option.opts[0] for option in _value_options(command)]
        options += ["--db", "--busy-timeout"]  # the group's own, before the command
        for option in options:
            cases.extend((name, option, hostile) for hostile in HOSTILE)
    return cases


def _with(base: tuple[str, ...], option: str, value: str) -> list[str]:
    """``base`` with ``option`` set to ``value``: replaced where it is given, else added."""
    args = list(base)
    if option in args:
        args[args.index(option) + 1] = value
    else:
        args += [option, value]
    return args


def _check(result: object, code: int, stderr: str) -> None:
    exception = getattr(result, "exception", None)
    assert exception is None or isinstance(exception, SystemExit), repr(exception)
    assert code in (0, 1, 2), (code, stderr)
    assert "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if line.startswith("Error")]
    assert len(errors) <= 1, stderr
    if code:
        assert len(errors) == 1, stderr
        assert len(errors[0]) < 600, errors[0][:700]


@pytest.mark.parametrize(("name", "option", "hostile"), _ops_cases())
def test_every_ops_option_survives_hostile_values(
    tmp_path: Path, name: str, option: str, hostile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a hostile value taken as a relative path lands here
    ledger = quarantined_file(tmp_path)
    before = file_state(ledger)
    value = HOSTILE[hostile].replace("{tmp}", str(tmp_path))
    base = tuple(arg.replace("{tmp}", str(tmp_path)) for arg in BASES[name])
    if option in ("--db", "--busy-timeout"):
        group = ["--db", str(ledger), "--busy-timeout", "1"]
        group[group.index(option) + 1] = value  # the group's option, before the command
        args = [*group, *base]
    else:
        args = ["--db", str(ledger), *_with(base, option, value)]
    result = CliRunner().invoke(ops, args)
    _check(result, result.exit_code, result.stderr)
    assert file_state(ledger) == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("ledger.db")) == [
        "ledger.db"
    ]


AGENT_EFFECT_OPTIONS = ["--output", "--db", "--seed", "--scenario"]


@pytest.mark.parametrize("option", AGENT_EFFECT_OPTIONS)
@pytest.mark.parametrize("hostile", list(HOSTILE))
def test_every_agent_effect_option_survives_hostile_values(
    tmp_path: Path, option: str, hostile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a hostile value taken as a relative path lands here
    value = HOSTILE[hostile].replace("{tmp}", str(tmp_path))
    kept = tmp_path / "kept.txt"
    kept.write_text("mine\n")
    args = _with(("--scenario", "conflict"), option, value)
    result = CliRunner().invoke(agent_effect, args)
    _check(result, result.exit_code, result.stderr if result.stderr_bytes else result.output)
    assert kept.read_text() == "mine\n"


def test_the_sweep_covers_every_value_option_of_every_command() -> None:
    """A new command or option is swept too: the table above names every command."""
    commands = set()
    for name, command in ops.commands.items():
        if isinstance(command, click.Group):
            commands |= {f"{name} {sub}" for sub in command.commands}
        elif name != "serve":
            commands.add(name)
    assert commands == set(BASES)
    assert {option.opts[0] for option in _value_options(agent_effect)} == set(AGENT_EFFECT_OPTIONS)
