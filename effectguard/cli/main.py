"""``agent-effect``: run failure scenarios against fake providers.

Exit status: 0 when every invariant held; 1 when a scenario's invariant broke
; 2 for bad
input (nothing is recorded then). ``cli`` is the Click group: other commands
attach to it with ``cli.add_command``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import click

from effectguard import __version__
from effectguard.cli._ops_click import one_line, unusable_paths
from effectguard.cli._progress import progress_on_stderr
from effectguard.cli._reports import (
    INVARIANT_BROKEN,
    OUTPUT,
    BadInput,
    check_output,
    write_json,
    write_text,
)
from effectguard.errors import EffectGuardError
from effectguard.testkit.checker import (
    EPISODE_KINDS,
    PROCESS_KINDS,
    CheckInputError,
    load_check,
    run_check,
)
from effectguard.testkit.receipt import render_html
from effectguard.testkit.scenarios import SCENARIOS, ScenarioError, run_scenario

__all__ = ["cli", "main"]


class _Group(click.Group):
    """``agent-effect``'s group: every error is one line, a path the OS refuses included."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        with _shortened(), unusable_paths():
            return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> object:
        with _shortened(), unusable_paths():
            return super().invoke(ctx)


@contextlib.contextmanager
def _shortened() -> Iterator[None]:
    try:
        yield
    except click.UsageError as exc:
        raise click.UsageError(one_line(exc.format_message()), exc.ctx) from exc
    except BadInput as exc:
        raise BadInput(one_line(exc.format_message())) from exc


@click.group(
    cls=_Group,
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.option(
    "--scenario",
    "scenario_name",
    type=click.Choice(list(SCENARIOS)),
    metavar="NAME",
    help="Run one scenario (see --list).",
)
@click.option("--list", "list_scenarios", is_flag=True, help="List the scenarios and exit.")
@click.option("--output", type=OUTPUT, help="Write the scenario's JSON report to this new file.")
@click.option("--force", is_flag=True, help="Let --output replace an existing file.")
@click.option(
    "--db",
    type=click.Path(dir_okay=False, path_type=Path),
    help="SQLite ledger file to record into (default: a temporary file).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the scenario's data.")
@click.version_option(__version__, prog_name="agent-effect")
@click.pass_context
def cli(
    ctx: click.Context,
    scenario_name: str | None,
    list_scenarios: bool,
    output: Path | None,
    force: bool,
    db: Path | None,
    seed: int,
) -> None:
    """Prove, against fake providers that count what they commit, that effects happen once.

    Run a scenario with --scenario NAME or list them with --list.
    """
    if ctx.invoked_subcommand is not None:
        if scenario_name or list_scenarios or output or db or force:
            msg = "--scenario, --list, --output, --force and --db cannot be combined with a command"
            raise click.UsageError(msg)
        return
    if list_scenarios:
        _list_scenarios(scenario_name)
        return
    if scenario_name is None:
        seeded = ctx.get_parameter_source("seed") is not click.core.ParameterSource.DEFAULT
        if output or db or seeded or force:
            msg = "--output, --force, --db and --seed need --scenario NAME"
            raise click.UsageError(msg)
        click.echo(ctx.get_help())
        return
    check_output(output, force=force)
    try:
        report = run_scenario(scenario_name, seed=seed, db=db)
    except (ScenarioError, EffectGuardError) as exc:
        raise BadInput(str(exc)) from exc
    click.echo(report.summary())
    if output is not None:
        write_json(output, report.to_json(), force=force)
    if not report.invariant_held:
        ctx.exit(INVARIANT_BROKEN)


@cli.command("check")
@click.argument("tool_spec", metavar="MODULE:FUNCTION")
@click.option(
    "--counter",
    metavar="MODULE:FUNCTION",
    help="counter(operation_id, idempotency_key) -> int: effects your provider committed.",
)
@click.option(
    "--episodes",
    type=click.IntRange(min=1, max=10_000),
    default=len(EPISODE_KINDS),
    show_default=True,
    help=f"Episodes to play in this process; the faults ({', '.join(EPISODE_KINDS)}) take turns.",
)
@click.option(
    "--processes",
    type=click.IntRange(min=0, max=1_000),
    default=len(PROCESS_KINDS),
    show_default=True,
    help=f"Episodes in other processes ({', '.join(PROCESS_KINDS)}, in turn); 0 plays none.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the arguments.")
@click.option(
    "--same-request",
    multiple=True,
    metavar="ARG",
    help="An argument that does not tell two requests apart (may stay out of the id).",
)
@click.option(
    "--sandbox-url-env",
    metavar="VAR",
    help="The variable your tool reads its sandbox's http:// URL from: a proxy in front of it "
    "drops the server's answers in lost-ack episodes.",
)
@click.option("--json", "json_path", type=OUTPUT, help="Write the JSON receipt to this new file.")
@click.option(
    "--html", "html_path", type=OUTPUT, help="Write the HTML receipt (one self-contained page)."
)
@click.option("--force", is_flag=True, help="Let --json and --html replace existing files.")
@click.pass_context
def check(
    ctx: click.Context,
    tool_spec: str,
    counter: str | None,
    episodes: int,
    processes: int,
    seed: int,
    same_request: tuple[str, ...],
    sandbox_url_env: str | None,
    json_path: Path | None,
    html_path: Path | None,
    force: bool,
) -> None:
    """Put your own @effect tool under injected faults and count the effects it made.

    Each episode runs the tool on a fresh temporary ledger: in this process,
    the acknowledgement lost after the handler returned, a failure before the
    handler is called, a handler timeout, the ledger unavailable at the claim
    and at the outcome; in child processes, a SIGKILL before and after the
    send, and two processes racing on one operation. Then the contract's
    claims are tested: the probe, idempotency_guaranteed, the operation id
    template. The current directory is importable, as with python -m. Exit 0
    when everything held, 1 on a duplicate, a lost confirmation or a broken
    claim. The table goes to stdout, progress to stderr.
    """
    if json_path is not None and html_path is not None and json_path == html_path:
        msg = "--json and --html name the same file"
        raise BadInput(msg)
    check_output(json_path, force=force)
    check_output(html_path, force=force)
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        subject = load_check(
            tool_spec, counter, same_request=same_request, sandbox_url_env=sandbox_url_env
        )
        with progress_on_stderr("check", episodes + processes) as advance:
            report = run_check(
                subject, episodes=episodes, processes=processes, seed=seed, progress=advance
            )
    except CheckInputError as exc:
        raise BadInput(str(exc)) from exc
    if counter is None:
        click.echo(
            "no --counter: effects are the handler's returns, and idempotency is not checked"
        )
    click.echo(f"lost acknowledgements: {report.lost_ack_by}")
    for line in report.table():
        click.echo(line)
    click.echo(report.summary())
    if json_path is not None:
        write_json(json_path, report.to_json(), force=force)
    if html_path is not None:
        write_text(html_path, render_html(report, contract=subject.contract), force=force)
    if not report.held:
        ctx.exit(INVARIANT_BROKEN)


def _list_scenarios(scenario_name: str | None) -> None:
    if scenario_name:
        msg = "--list and --scenario cannot be combined"
        raise click.UsageError(msg)
    width = max(len(name) for name in SCENARIOS)
    for scenario in SCENARIOS.values():
        click.echo(f"{scenario.name.ljust(width)}  {scenario.summary}")


def main() -> None:
    """Run ``agent-effect``.

    Scenarios make effects fail on purpose, so the
    library's own log lines (which would otherwise reach stderr through Python's
    last-resort handler) are shown only from the level ``EFFECTGUARD_LOG_LEVEL``
    names, ERROR by default.
    """
    level = os.environ.get("EFFECTGUARD_LOG_LEVEL", "ERROR").upper()
    if level not in logging.getLevelNamesMapping():
        sys.stderr.write(f"agent-effect: EFFECTGUARD_LOG_LEVEL={level!r} is not a logging level\n")
        sys.exit(2)
    # This is the application, not the library: it may configure logging.
    logging.basicConfig(format="%(name)s %(levelname)s %(message)s")
    logging.getLogger("effectguard").setLevel(level)
    cli(prog_name="agent-effect")
