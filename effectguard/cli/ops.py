"""``agent-effect-ops``: see, understand and resolve guarded side effects.

Every failure is one line on stderr naming the problem, with exit code 1 when
the ledger refused or lacks what was asked, and 2 when the command line itself
is wrong; in both cases the ledger is left exactly as it was. Read commands
never create a ledger file. Only the public API is used, so what an operator
can do here a program can do too.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NoReturn, TypeVar

import click

import effectguard
from effectguard import (
    EffectGuardError,
    EffectLedger,
    EffectStatus,
    InvalidRequestError,
    OperationRecord,
)
from effectguard.cli import _ops_views as views
from effectguard.ledger import open_ledger

__all__ = ["EXIT_OK", "EXIT_REFUSED", "EXIT_USAGE", "OpsError", "OpsUsageError", "main"]

#: The command did what was asked.
EXIT_OK = 0
#: The ledger refused the request, or lacks what it names (operation, file, intact chain).
EXIT_REFUSED = 1
#: The command line is wrong (unknown option or status, malformed JSON, missing audit field).
EXIT_USAGE = 2

_EXIT_CODES = """\b
Exit codes:
  0  done
  1  refused or not found: unknown operation, illegal transition, live
     lease, missing/foreign/newer/locked ledger, broken hash chain
  2  usage error: bad option or status, malformed JSON, missing audit field"""

_POSTGRES_SCHEMES = ("postgresql://", "postgres://")

F = TypeVar("F", bound=Callable[..., Any])


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


class OpsError(click.ClickException):
    """The ledger refused the request or lacks what it names: exit 1, one line on stderr."""

    exit_code = EXIT_REFUSED

    def __init__(self, message: str) -> None:
        super().__init__(_one_line(message))


class OpsUsageError(click.ClickException):
    """The command line is wrong: exit 2, one line on stderr (Click's usage text is left out)."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str) -> None:
        super().__init__(_one_line(message))


@contextlib.contextmanager
def _one_line_usage(ctx: click.Context) -> Iterator[None]:
    try:
        yield
    except click.exceptions.NoArgsIsHelpError:
        raise
    except click.UsageError as exc:
        message = exc.format_message().rstrip(".")
        raise OpsUsageError(f"{message} (see '{ctx.command_path} --help')") from exc


class _Command(click.Command):
    """A command whose usage errors are one line, and whose help lists the exit codes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("epilog", _EXIT_CODES)
        super().__init__(*args, **kwargs)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        with _one_line_usage(ctx):
            return super().parse_args(ctx, args)


class _Group(click.Group):
    command_class = _Command

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        with _one_line_usage(ctx):
            return super().parse_args(ctx, args)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        with _one_line_usage(ctx):
            return super().resolve_command(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        # "Missing command" is raised here, not while parsing.
        with _one_line_usage(ctx):
            return super().invoke(ctx)


@contextlib.contextmanager
def _refusals() -> Iterator[None]:
    """Turn the library's errors into one-line CLI errors with the documented exit codes."""
    try:
        yield
    except InvalidRequestError as exc:
        raise OpsUsageError(str(exc)) from exc
    except EffectGuardError as exc:
        raise OpsError(str(exc)) from exc


@dataclass
class _Session:
    """The group's options; the ledger is opened on first use and closed with the context."""

    target: str | None
    busy_timeout: float
    ledger: EffectLedger | None = field(default=None, init=False)

    def open(self, ctx: click.Context) -> EffectLedger:
        if self.ledger is not None:
            return self.ledger
        if not self.target:
            hint = f"see '{ctx.find_root().command_path} --help'"
            msg = f"Missing option '--db': name the ledger file or postgresql:// URL ({hint})"
            raise OpsUsageError(msg)
        options: dict[str, Any] = {}
        if not self.target.startswith(_POSTGRES_SCHEMES):
            # A missing file is an error for every command: none of them can succeed on an
            # empty ledger, and a read must never leave a new file behind.
            options = {"create": False, "busy_timeout": self.busy_timeout}
        with _refusals():
            ledger = open_ledger(self.target, **options)
        ctx.call_on_close(ledger.close)
        self.ledger = ledger
        return ledger


def _ledger() -> EffectLedger:
    ctx = click.get_current_context()
    return ctx.find_object(_Session).open(ctx)  # type: ignore[union-attr]


def _parse_status(
    ctx: click.Context,  # noqa: ARG001
    param: click.Parameter,  # noqa: ARG001
    value: str | None,
) -> EffectStatus | None:
    # A callback rather than a ParamType subclass: ParamType is generic only in newer Click.
    if value is None:
        return None
    try:
        return EffectStatus.parse(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


def _parse_json(ctx: click.Context, param: click.Parameter, value: str) -> Any:  # noqa: ARG001
    def refuse(constant: str) -> NoReturn:
        msg = f"{constant} is not a JSON number"
        raise ValueError(msg)

    try:
        return json.loads(value, parse_constant=refuse)
    except ValueError as exc:
        msg = f"not valid JSON: {exc}"
        raise click.BadParameter(msg) from exc


def _non_empty(ctx: click.Context, param: click.Parameter, value: str) -> str:  # noqa: ARG001
    if not value.strip():
        msg = "must not be empty"
        raise click.BadParameter(msg)
    return value


def _audit_options(command: F) -> F:
    """Add the three audit options every operator write requires."""
    for name, metavar, text in reversed(
        (
            ("--actor", "WHO", "Who is resolving this (your name or on-call handle)."),
            ("--reason", "WHY", "Why, in a sentence a later reader understands."),
            ("--evidence-reference", "REF", "Where the evidence is: ticket, link, case id."),
        )
    ):
        command = click.option(
            name, required=True, metavar=metavar, callback=_non_empty, help=text
        )(command)
    return command


def _json_option(command: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON for machines.")(command)


def _operation(ledger: EffectLedger, operation_id: str) -> OperationRecord:
    with _refusals():
        record = ledger.get(operation_id)
    if record is None:
        msg = f"no operation {operation_id!r} in the ledger"
        raise OpsError(msg)
    return record


def _now() -> datetime:
    return datetime.now(UTC)


@click.group(
    cls=_Group,
    epilog=_EXIT_CODES,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.option(
    "--db",
    "target",
    metavar="PATH|URL",
    help="The ledger: a SQLite file (never created here) or a postgresql:// URL.",
)
@click.option(
    "--busy-timeout",
    type=click.FloatRange(min=0),
    default=10.0,
    show_default=True,
    metavar="SECONDS",
    help="How long a write waits for another process's lock on a SQLite ledger.",
)
@click.version_option(effectguard.__version__, prog_name="agent-effect-ops")
@click.pass_context
def main(ctx: click.Context, target: str | None, busy_timeout: float) -> None:
    """See, understand and resolve the side effects effectguard guards.

    Start with `list --status quarantined`, read an operation with `show` and
    `events`, check the provider's own records, then resolve it with `confirm`
    (it happened), `reject` (it did not and will not) or `authorize-retry`
    (send it once more, with the same provider key). Every resolution needs
    --actor, --reason and --evidence-reference, and is recorded with your OS
    account and host in the operation's hash-chained history.
    """
    ctx.obj = _Session(target, busy_timeout)


@main.command("list", short_help="List operations, most recently changed first.")
@click.option(
    "--status",
    metavar="STATUS",
    callback=_parse_status,
    help="Only this status, in any case (quarantined, outcome-unknown…).",
)
@click.option("--contract", metavar="NAME", help="Only operations of this contract.")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True, metavar="N")
@_json_option
def list_command(
    status: EffectStatus | None, contract: str | None, limit: int, as_json: bool
) -> None:
    """List operations, most recently changed first."""
    ledger = _ledger()
    with _refusals():
        records = ledger.list_operations(status=status, contract=contract, limit=limit)
    if as_json:
        click.echo(views.to_json([views.record_json(record) for record in records]))
    elif records:
        click.echo(views.operations_table(records, _now()))
    else:
        click.echo("no operations match")


@main.command(short_help="Show everything recorded about OP.")
@click.argument("operation_id", metavar="OP")
@_json_option
def show(operation_id: str, as_json: bool) -> None:
    """Show everything recorded about operation OP."""
    record = _operation(_ledger(), operation_id)
    if as_json:
        click.echo(views.to_json(views.record_json(record)))
    else:
        click.echo(views.operation_detail(record, _now()))


@main.command(short_help="Show the history of OP, oldest first.")
@click.argument("operation_id", metavar="OP")
@_json_option
def events(operation_id: str, as_json: bool) -> None:
    """Show the history of operation OP, oldest first."""
    ledger = _ledger()
    _operation(ledger, operation_id)
    with _refusals():
        history = ledger.events(operation_id)
    if as_json:
        click.echo(views.to_json([views.event_json(event) for event in history]))
    else:
        click.echo(views.events_table(history))


def _report(ledger: EffectLedger, record: OperationRecord, verb: str) -> None:
    """Print one line saying what the resolution recorded, from its own event."""
    with _refusals():
        event = ledger.events(record.operation_id)[-1]
    recorder = f"{event.evidence.get('os_user')} on {event.evidence.get('host')}"
    click.echo(
        f"{verb} {record.operation_id!r}: {event.from_status} -> {event.to_status} "
        f"(event {event.seq}, actor {event.evidence.get('actor')!r}, recorded as {recorder})"
    )


@main.command(short_help="Record that OP took effect, with its output.")
@click.argument("operation_id", metavar="OP")
@click.option(
    "--output-json",
    "output",
    required=True,
    metavar="JSON",
    callback=_parse_json,
    help="The output every later call replays, in the form the contract stores it.",
)
@click.option(
    "--provider-operation-id",
    required=True,
    metavar="ID",
    callback=_non_empty,
    help="The provider's own id for the effect (a charge id, a message id).",
)
@_audit_options
def confirm(
    operation_id: str,
    output: Any,
    provider_operation_id: str,
    actor: str,
    reason: str,
    evidence_reference: str,
) -> None:
    """Record that operation OP took effect; later calls replay the given output."""
    ledger = _ledger()
    with _refusals():
        record = ledger.confirm(
            operation_id,
            output=output,
            provider_operation_id=provider_operation_id,
            actor=actor,
            reason=reason,
            evidence_reference=evidence_reference,
        )
    _report(ledger, record, "confirmed")


@main.command(short_help="Record that OP did not and will not take effect.")
@click.argument("operation_id", metavar="OP")
@_audit_options
def reject(operation_id: str, actor: str, reason: str, evidence_reference: str) -> None:
    """Record that operation OP did not take effect and never will; it is never sent again."""
    ledger = _ledger()
    with _refusals():
        record = ledger.reject(
            operation_id, actor=actor, reason=reason, evidence_reference=evidence_reference
        )
    _report(ledger, record, "rejected")


@main.command("authorize-retry", short_help="Allow OP one more dispatch, same provider key.")
@click.argument("operation_id", metavar="OP")
@_audit_options
def authorize_retry(operation_id: str, actor: str, reason: str, evidence_reference: str) -> None:
    """Allow operation OP exactly one more dispatch, with the same provider key.

    The next execute of OP sends it; if that attempt's outcome is uncertain
    too, the operation waits for an operator again. Authorizing vouches that
    no earlier attempt can still take effect, so it clears any overlap risk.
    """
    ledger = _ledger()
    with _refusals():
        record = ledger.authorize_retry(
            operation_id, actor=actor, reason=reason, evidence_reference=evidence_reference
        )
    _report(ledger, record, "authorized a retry of")


@main.command(short_help="Check every hash chain; exit 1 naming any break.")
@_json_option
def verify(as_json: bool) -> None:
    """Check every operation's hash-chained history; exit 1 naming any break."""
    ledger = _ledger()
    with _refusals():
        report = ledger.verify()
    if as_json:
        click.echo(views.to_json(views.report_json(report)))
    else:
        for problem in report.problems:
            where = "" if problem.seq is None else f" event {problem.seq}"
            click.echo(f"operation {problem.operation_id!r}{where}: {problem.problem}")
        click.echo(
            f"checked {report.operations_checked} operations and {report.events_checked} events"
        )
    if not report.ok:
        first = report.problems[0]
        where = "" if first.seq is None else f" event {first.seq}"
        msg = (
            f"the ledger has been tampered with: {len(report.problems)} problem(s); "
            f"first: operation {first.operation_id!r}{where}: {first.problem}"
        )
        raise OpsError(msg)


if __name__ == "__main__":
    main()
