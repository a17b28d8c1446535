"""``agent-effect-ops runs list|show``: agent runs and the operations they made or wait on.

With ``--checkpoints`` (an AgentRuntime's checkpoint file) it formats what
:mod:`effectguard.runtime.waiting` returns; the file is never created here,
and a missing one is a one-line error. Without it, ``--db`` and ``--tools``
name a ledger and the ``@effect`` tools of a framework adapter (LangGraph,
Pydantic AI, OpenAI Agents), and it formats the runs
:func:`effectguard.operator.framework_runs` finds by the call scope their
operation ids hold.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import click

from effectguard.cli import _ops_views as views
from effectguard.cli._ops_click import OpsError, OpsGroup, json_option, refusals
from effectguard.cli._ops_session import load_tools, open_ledger, tools_option

if TYPE_CHECKING:
    from effectguard.operator import ScopedRun
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
    metavar="PATH",
    envvar="EFFECTGUARD_CHECKPOINTS",
    help="The SQLite checkpoint file of the AgentRuntime (never created here). "
    "Without it: the framework runs in --db, found through --tools.",
)

_NO_TOOLS = (
    "name the checkpoint file of an AgentRuntime (--checkpoints PATH), or, for the runs of a "
    "framework adapter, the ledger (--db) and the @effect tools whose operation ids hold the "
    "call scope (--tools MODULE or EFFECTGUARD_TOOLS)"
)


def _framework() -> tuple[Any, Any]:
    """The ledger and the tool index for the framework runs; an error naming both if missing."""
    ctx = click.get_current_context()
    session = ctx.find_root().obj
    index = load_tools(ctx.params.get("tools"))
    if index is None or session is None or not session.target:
        raise OpsError(_NO_TOOLS)
    return open_ledger(), index


def _scoped_line(run: ScopedRun) -> tuple[str, str, str, str]:
    counts = ", ".join(f"{status} {count}" for status, count in run.counts.items())
    return (run.run_id, str(len(run.operations)), counts, "yes" if run.needs_attention else "no")


_SCOPED_HEAD = ("RUN", "OPERATIONS", "BY STATUS", "NEEDS A PERSON")


@click.group(cls=OpsGroup, short_help="Agent runs and the operations they made or wait on.")
def runs() -> None:
    """Agent runs and their operations: which resolution unblocks which run.

    With --checkpoints (an AgentRuntime): the runs it checkpointed and what
    each waits on; with --db, each operation's status is read from the
    ledger now. A run is resumable when nothing it waits on needs a person
    any more: resume it with AgentRuntime.start_or_resume (or resume).

    Without --checkpoints (LangGraph, Pydantic AI, OpenAI Agents): the runs
    the ledger in --db holds operations of, grouped by the call scope (thread,
    conversation or run id) their operation ids were made from. --tools names
    the @effect tools, whose call_scoped(...) ids or {run_id} templates say
    where the scope is; a business-key id belongs to no run.
    """


@runs.command("list", short_help="List runs (WAITING by default) and what they wait on.")
@_CHECKPOINTS
@tools_option
@click.option(
    "--status",
    default="WAITING",
    show_default=True,
    metavar="STATE",
    help="RUNNING, WAITING, COMPLETED, FAILED or ALL (checkpointed runs only).",
)
@json_option
def list_runs(checkpoints: str | None, tools: str | None, status: str, as_json: bool) -> None:
    """List the runs in a state, oldest first, with the operations each waits on.

    Without --checkpoints: every framework run in the ledger, most recently
    active first, with its operations counted by status.
    """
    if checkpoints is None:
        _list_framework_runs(as_json=as_json)
        return
    del tools  # the checkpoint names each run's operations itself
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


def _list_framework_runs(*, as_json: bool) -> None:
    from effectguard.operator import framework_runs  # noqa: PLC0415 - loaded on use

    ledger, index = _framework()
    with refusals():
        found = framework_runs(ledger, index)
    if as_json:
        click.echo(views.to_json([run.to_json() for run in found]))
    elif found:
        click.echo(views.table(_SCOPED_HEAD, map(_scoped_line, found)))
    else:
        click.echo("no operation in the ledger holds a call scope of these tools")


def _show_framework_run(run_id: str, *, as_json: bool) -> None:
    from effectguard.operator import framework_run  # noqa: PLC0415 - loaded on use

    ledger, index = _framework()
    with refusals():
        run = framework_run(ledger, index, run_id)
    if as_json:
        click.echo(views.to_json(run.to_json()))
        return
    click.echo(views.table(_SCOPED_HEAD, [_scoped_line(run)]))
    rows = [
        (op.operation_id, op.call_id or "-", op.status.value, str(op.attempts), op.contract)
        for op in run.operations
    ]
    click.echo(views.table(("OPERATION", "TOOL CALL", "STATUS", "ATTEMPTS", "CONTRACT"), rows))
    for op in run.operations:
        if op.blocks:
            click.echo(
                f"{op.operation_id} is {op.status.value}: resolve it (reprobe, confirm, reject "
                "or authorize-retry), then resume the run through its framework adapter"
            )


@runs.command("show", short_help="Show one run and what it waits on.")
@click.argument("run_id", metavar="RUN")
@_CHECKPOINTS
@tools_option
@json_option
def show_run(run_id: str, checkpoints: str | None, tools: str | None, as_json: bool) -> None:
    """Show run RUN: its state, each operation it waits on with its status, its approvals.

    Without --checkpoints: the framework run RUN's operations in the ledger.
    """
    if checkpoints is None:
        _show_framework_run(run_id, as_json=as_json)
        return
    del tools  # the checkpoint names each run's operations itself
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
