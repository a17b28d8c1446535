"""``agent-effect-ops runs list|show``: the agent runs waiting on operations, and on which.

Formats what :mod:`effectguard.runtime.waiting` returns. The checkpoint file
is never created here: a missing one is a one-line error.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import click

from effectguard.cli import _ops_views as views
from effectguard.cli._ops_click import OpsError, OpsGroup, json_option, refusals
from effectguard.cli._ops_session import open_ledger

if TYPE_CHECKING:
    from effectguard.runtime import CheckpointStore, RunView

__all__ = ["runs"]


@contextlib.contextmanager
def _store(path: str) -> Iterator[CheckpointStore]:
    if not os.path.isfile(path):  # noqa: PTH113 - a path from the command line
        what = "is a directory" if os.path.isdir(path) else "does not exist"  # noqa: PTH112 - as above
        msg = f"checkpoint file {path!r} {what}: name the file your AgentRuntime checkpoints to"
        raise OpsError(msg)
    from effectguard.runtime import SQLiteCheckpointStore  # noqa: PLC0415 - loaded on use

    with refusals():
        store = SQLiteCheckpointStore(path)
    try:
        yield store
    finally:
        store.close()


def _ledger_or_none() -> Any:
    ctx = click.get_current_context()
    session = ctx.find_root().obj
    return None if session is None or not session.target else open_ledger()


def _line(view: RunView) -> tuple[str, str, str, str]:
    waits = [
        f"{op.operation_id} ({'?' if op.status is None else op.status.value})"
        for op in view.operations
    ]
    waits += [f"approval of {item.tool} call {item.call_id}" for item in view.approvals]
    return (
        view.run_id,
        view.state.value,
        "yes" if view.resumable else "no",
        ", ".join(waits) or "-",
    )


_CHECKPOINTS = click.option(
    "--checkpoints",
    required=True,
    metavar="PATH",
    envvar="EFFECTGUARD_CHECKPOINTS",
    help="The SQLite checkpoint file of the AgentRuntime (never created here).",
)


@click.group(cls=OpsGroup, short_help="Agent runs waiting on operations, and on which.")
def runs() -> None:
    """Agent runs waiting on operations: which resolution unblocks which run.

    With --db, each operation's status is read from the ledger now. A run is
    resumable when nothing it waits on needs a person any more: resume it
    with AgentRuntime.start_or_resume (or resume).
    """


@runs.command("list", short_help="List runs (WAITING by default) and what they wait on.")
@_CHECKPOINTS
@click.option(
    "--status",
    default="WAITING",
    show_default=True,
    metavar="STATE",
    help="RUNNING, WAITING, COMPLETED, FAILED or ALL.",
)
@json_option
def list_runs(checkpoints: str, status: str, as_json: bool) -> None:
    """List the runs in a state, oldest first, with the operations each waits on."""
    from effectguard.runtime import RunState, list_runs  # noqa: PLC0415 - loaded on use

    state = None
    if status.upper() != "ALL":
        try:
            state = RunState(status.upper())
        except ValueError as exc:
            choices = ", ".join([*(s.value for s in RunState), "ALL"])
            msg = f"unknown run state {status!r}; choose one of {choices}"
            raise click.BadParameter(msg, param_hint="'--status'") from exc
    with _store(checkpoints) as store:
        ledger = _ledger_or_none()
        with refusals():
            found = list_runs(store, ledger, state=state)
    if as_json:
        click.echo(views.to_json([view.to_json() for view in found]))
    elif found:
        click.echo(views.table(("RUN", "STATE", "RESUMABLE", "WAITS ON"), map(_line, found)))
    else:
        click.echo("no runs match")


@runs.command("show", short_help="Show one run and what it waits on.")
@click.argument("run_id", metavar="RUN")
@_CHECKPOINTS
@json_option
def show_run(run_id: str, checkpoints: str, as_json: bool) -> None:
    """Show run RUN: its state, each operation it waits on with its status, its approvals."""
    from effectguard.runtime import describe_run  # noqa: PLC0415 - loaded on use

    with _store(checkpoints) as store:
        ledger = _ledger_or_none()
        with refusals():
            view = describe_run(store, run_id, ledger)
    if as_json:
        click.echo(views.to_json(view.to_json()))
        return
    click.echo(views.table(("RUN", "STATE", "RESUMABLE", "WAITS ON"), [_line(view)]))
    for op in view.operations:
        if op.blocks:
            click.echo(
                f"{op.operation_id} is {op.status.value if op.status else '?'}: resolve it "
                "(reprobe, confirm, reject or authorize-retry), then resume the run"
            )
