"""``agent-effect-ops``: see, understand and resolve guarded side effects.

Every failure is one line on stderr naming the problem, with exit code 1 when
the ledger refused or lacks what was asked, and 2 when the command line itself
is wrong; in both cases the ledger is left exactly as it was. Read commands
never create a ledger file. Only the public API is used, so what an operator
can do here a program can do too.
"""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

import effectguard
from effectguard.cli import _ops_views as views
from effectguard.cli._ops_click import (
    EXIT_CODES_HELP,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_USAGE,
    LIMIT,
    F,
    OpsError,
    OpsGroup,
    OpsUsageError,
    audit_options,
    bounded_seconds,
    expect_options,
    json_option,
    non_empty,
    parse_json,
    parse_status,
    refusals,
)
from effectguard.cli._ops_session import (
    Session,
    load_tools,
    open_ledger,
    operation,
    tools_option,
)

#: As :data:`effectguard.ledger.sqlite.MAX_BUSY_TIMEOUT` (not imported: --help stays cheap).
MAX_BUSY_TIMEOUT = (2**31 - 1) / 1000

if TYPE_CHECKING:
    # Annotations only: `agent-effect-ops --help` loads neither the ledger nor the model.
    from effectguard import EffectLedger, EffectStatus
    from effectguard._decorator import ToolIndex
    from effectguard.ledger import Seen, VerifyReport
    from effectguard.operator._recover import ProbedOutput
    from effectguard.operator._signing import SignedExport

__all__ = ["EXIT_OK", "EXIT_REFUSED", "EXIT_USAGE", "OpsError", "OpsUsageError", "main"]


def _now() -> datetime:
    return datetime.now(UTC)


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:  # noqa: ARG001 - Click's callback signature
    # Not click.version_option(effectguard.__version__): that reads the package metadata
    # (importlib.metadata) on every start, and --help must stay fast.
    if value and not ctx.resilient_parsing:
        click.echo(f"agent-effect-ops, version {effectguard.__version__}")
        ctx.exit()


@click.group(
    cls=OpsGroup,
    epilog=EXIT_CODES_HELP,
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
    type=float,
    callback=bounded_seconds(0, MAX_BUSY_TIMEOUT),  # SQLite waits at most that long
    default=10.0,
    show_default=True,
    metavar="SECONDS",
    help="How long a write waits for another process's lock on a SQLite ledger.",
)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and exit.",
)
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
    ctx.obj = Session(target, busy_timeout)


@main.command("list", short_help="List operations, most recently changed first.")
@click.option(
    "--status",
    metavar="STATUS",
    callback=parse_status,
    help="Only this status, in any case (quarantined, outcome-unknown…); all: every one.",
)
@click.option("--contract", metavar="NAME", help="Only operations of this contract.")
@click.option("--limit", type=LIMIT, default=100, show_default=True, metavar="N")
@json_option
def list_command(
    status: EffectStatus | None, contract: str | None, limit: int, as_json: bool
) -> None:
    """List operations, most recently changed first."""
    ledger = open_ledger()
    with refusals():
        records = ledger.list_operations(status=status, contract=contract, limit=limit)
    if as_json:
        click.echo(views.to_json([views.record_json(record) for record in records]))
    elif records:
        click.echo(views.operations_table(records, _now()))
    else:
        click.echo("no operations match")


@main.command(short_help="Show everything recorded about OP.")
@click.argument("operation_id", metavar="OP")
@json_option
def show(operation_id: str, as_json: bool) -> None:
    """Show everything recorded about operation OP."""
    record = operation(open_ledger(), operation_id)
    if as_json:
        click.echo(views.to_json(views.record_json(record)))
    else:
        click.echo(views.operation_detail(record, _now()))


@main.command(short_help="Show the history of OP, oldest first.")
@click.argument("operation_id", metavar="OP")
@json_option
@click.option("--wide", is_flag=True, help="Show all the evidence, however wide the terminal.")
def events(operation_id: str, as_json: bool, wide: bool) -> None:
    """Show the history of operation OP, oldest first.

    On a terminal (or with COLUMNS set) each line is cut to its width, the
    evidence ending in an ellipsis; --wide, --json or a pipe show it all.
    """
    ledger = open_ledger()
    operation(ledger, operation_id)
    with refusals():
        history = ledger.events(operation_id)
    if as_json:
        click.echo(views.to_json([views.event_json(event) for event in history]))
    else:
        click.echo(views.events_table(history, width=None if wide else _terminal_width()))


def _terminal_width() -> int | None:
    """The width to fit lines to: the terminal's, or COLUMNS; None when output is piped."""
    # Not shutil.get_terminal_size: importing shutil is a visible part of --help's time.
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if not sys.stdout.isatty():
        return None
    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns
    except OSError:
        return None


def _resolve(
    operation_id: str,
    action: str,
    tools: str | None,
    dry_run: bool,
    *,
    from_probe: bool = False,
    **fields: Any,
) -> None:
    """Run one resolution through the library's checks; print what it recorded or would."""
    from effectguard.ledger import Seen  # noqa: PLC0415 - loaded only by a resolution
    from effectguard.operator._resolve import resolve  # noqa: PLC0415 - loaded only by a resolution

    events, head = fields.pop("expect_events"), fields.pop("expect_head")
    with refusals():
        expected = None if events is None and head is None else Seen(events, head)
    index = load_tools(tools)
    ledger = open_ledger(write=not dry_run)
    output_from = None
    if from_probe:
        probed = _probed(ledger, operation_id, index, expected)
        fields.update(output=probed.output, provider_operation_id=probed.provider_operation_id)
        # The decision is on the state the probe was asked about, unless the operator named one.
        expected, output_from = expected or probed.seen, probed.evidence
        click.echo(f"the probe answers committed; output: {views.to_json(probed.output)}")
    with refusals():
        done = resolve(
            ledger,
            operation_id,
            action,  # type: ignore[arg-type]
            tools=index,
            dry_run=dry_run,
            expected=expected,
            output_from=output_from,
            **fields,
        )
    for warning in done.warnings:
        click.echo(f"warning: {warning}", err=True)
    if dry_run:
        click.echo(views.resolution_preview(done.before, done.after, action, _now()))
        return
    with refusals():
        event = ledger.events(operation_id)[-1]
    recorder = f"{event.evidence.get('os_user')} on {event.evidence.get('host')}"
    from effectguard._configure import trace_resolution  # noqa: PLC0415 - keeps --help cheap

    trace_resolution(done.after, event)  # a span, when the process has a tracer
    verb = {
        "confirm": "confirmed",
        "reject": "rejected",
        "approve": "approved",
        "deny": "denied",
    }.get(action, "authorized a retry of")
    click.echo(
        f"{verb} {operation_id!r}: {event.from_status} -> {event.to_status} "
        f"(event {event.seq}, actor {event.evidence.get('actor')!r}, recorded as {recorder})"
    )


def _dry_run_option(command: F) -> F:
    return click.option(
        "--dry-run",
        is_flag=True,
        help="Check everything and print the record before and after; write nothing.",
    )(command)


def _probed(
    ledger: EffectLedger, operation_id: str, index: ToolIndex | None, expected: Seen | None
) -> ProbedOutput:
    """The output OP's probe holds now, asked on the state the operator expects (if named)."""
    from effectguard.operator._recover import output_from_probe  # noqa: PLC0415 - on use

    record = operation(ledger, operation_id)
    with refusals():
        if expected is not None and not expected.matches(record):
            from effectguard.ledger import _resolution  # noqa: PLC0415 - on use

            raise _resolution.changed(operation_id, _resolution.described(expected), record)
        found = None if index is None else index.find(record.contract, record.contract_version)
        return output_from_probe(record, None if found is None else found.contract)


@main.command(short_help="Record that OP took effect, with its output.")
@click.argument("operation_id", metavar="OP")
@click.option(
    "--output-json",
    "output",
    metavar="JSON",
    callback=parse_json,
    help="The output every later call replays, in the form the contract stores it.",
)
@click.option(
    "--provider-operation-id",
    metavar="ID",
    callback=non_empty,
    help="The provider's own id for the effect (a charge id, a message id).",
)
@click.option(
    "--from-probe",
    is_flag=True,
    help="Ask the tool's probe (needs --tools) and confirm the output it holds.",
)
@audit_options
@expect_options
@tools_option
@_dry_run_option
def confirm(
    operation_id: str, tools: str | None, dry_run: bool, from_probe: bool, **fields: Any
) -> None:
    """Record that operation OP took effect; later calls replay the given output.

    Give the output and the provider's id (--output-json, --provider-operation-id),
    or --from-probe to take both from the tool's probe, which must answer
    committed; the confirmation then lands only on the state the probe was asked
    about (or the one --expect-events/--expect-head names). With --tools the
    output is checked against the tool's return type first, and refused if it
    does not match; without, it is stored unchecked (warned).
    """
    given = click.get_current_context().get_parameter_source
    typed = [  # given on the command line, whatever the value: `--output-json null` is typed
        option
        for option, name in (
            ("--output-json", "output"),
            ("--provider-operation-id", "provider_operation_id"),
        )
        if given(name) is click.core.ParameterSource.COMMANDLINE
    ]
    if from_probe and typed:
        msg = f"--from-probe takes the output and the provider's id from the probe: drop {typed[0]}"
        raise OpsUsageError(msg)
    if from_probe and not (tools and tools.strip()):
        msg = "--from-probe needs --tools MODULE (or EFFECTGUARD_TOOLS): the probe is in your code"
        raise OpsUsageError(msg)
    if not from_probe and len(typed) < 2:  # noqa: PLR2004 - both options
        msg = "confirm needs --output-json and --provider-operation-id, or --from-probe"
        raise OpsUsageError(msg)
    _resolve(operation_id, "confirm", tools, dry_run, from_probe=from_probe, **fields)


@main.command(short_help="Record that OP did not and will not take effect.")
@click.argument("operation_id", metavar="OP")
@audit_options
@expect_options
@_dry_run_option
def reject(operation_id: str, dry_run: bool, **fields: Any) -> None:
    """Record that operation OP did not take effect and never will; it is never sent again."""
    _resolve(operation_id, "reject", None, dry_run, **fields)


@main.command("authorize-retry", short_help="Allow OP one more dispatch, same provider key.")
@click.argument("operation_id", metavar="OP")
@audit_options
@expect_options
@_dry_run_option
def authorize_retry(operation_id: str, dry_run: bool, **fields: Any) -> None:
    """Allow operation OP exactly one more dispatch, with the same provider key.

    The next execute of OP sends it; if that attempt's outcome is uncertain
    too, the operation waits for an operator again. Authorizing vouches that
    no earlier attempt can still take effect, so it clears any overlap risk.
    """
    _resolve(operation_id, "authorize-retry", None, dry_run, **fields)


def _approval_duration(
    ctx: click.Context,  # noqa: ARG001 - Click's callback signature
    param: click.Parameter,  # noqa: ARG001 - Click's callback signature
    value: str | None,
) -> float | None:
    """Option callback: ``--expires-in`` in seconds (None when not given).

    Read by :func:`effectguard.operator.parse_approval_duration`, exactly as the
    console reads its "expires in" field; a usage error (exit 2) when refused.
    """
    if value is None:
        return None
    from effectguard.operator._durations import parse_approval_duration  # noqa: PLC0415 - keeps --help cheap

    try:
        return parse_approval_duration(value, field="--expires-in")
    except ValueError as exc:
        raise OpsUsageError(str(exc)) from exc


@main.command(short_help="Approve exactly the request OP holds; the next call sends it once.")
@click.argument("operation_id", metavar="OP")
@audit_options
@click.option(
    "--expires-in",
    metavar="DURATION",
    callback=_approval_duration,
    help="Void the approval if no call has used it within DURATION (e.g. 30m, 2h, 1d).",
)
@expect_options
@_dry_run_option
def approve(operation_id: str, dry_run: bool, expires_in: float | None, **fields: Any) -> None:
    """Approve the request operation OP holds (AWAITING_APPROVAL): exactly those arguments.

    The next call with the same request sends it, once, however many race;
    a different request under OP stays a conflict. `show OP` shows what you
    approve. Only an operation awaiting approval can be approved.
    """
    _resolve(operation_id, "approve", None, dry_run, expires_in=expires_in, **fields)


@main.command(short_help="Deny the request OP holds: REJECTED, never sent.")
@click.argument("operation_id", metavar="OP")
@audit_options
@expect_options
@_dry_run_option
def deny(operation_id: str, dry_run: bool, **fields: Any) -> None:
    """Deny the request operation OP holds (AWAITING_APPROVAL): it is REJECTED and never sent."""
    _resolve(operation_id, "deny", None, dry_run, **fields)


@main.command(short_help="Check every hash chain, row and claim; exit 1 naming any break.")
@json_option
@click.option(
    "--anchor",
    "anchor_file",
    type=click.Path(dir_okay=False, exists=True),
    help="Also check the ledger still extends the head exported to FILE earlier.",
    metavar="FILE",
)
@click.option(
    "--export-anchor",
    "export_file",
    type=click.Path(dir_okay=False, writable=True),
    help="When the ledger verifies, write its anchor head to FILE (keep it elsewhere).",
    metavar="FILE",
)
@click.option(
    "--archive",
    "archive_file",
    type=click.Path(dir_okay=False, exists=True),
    help="Also check FILE: the chains a prune archived, or with --public-key a signed export.",
    metavar="FILE",
)
@click.option(
    "--public-key",
    "public_key",
    type=click.Path(dir_okay=False, exists=True),
    help="--archive FILE is a signed export: check its signature with this Ed25519 key.",
    metavar="PUB",
)
def verify(
    as_json: bool,
    anchor_file: str | None,
    export_file: str | None,
    archive_file: str | None,
    public_key: str | None,
) -> None:
    """Check every operation's hash-chained history, its row, its tombstone and the claims anchor.

    Exit 1 naming any break. An exported head (--export-anchor), kept where
    whoever can write the ledger cannot, lets a later --anchor check catch a
    deletion that rewrote the ledger's own anchor too. A signed export
    (--archive FILE --public-key PUB) proves more: the file is exactly what
    was signed, and the ledger still holds every event it lists and extends
    the anchor it signed.
    """
    from effectguard.ledger import AnchorHead  # noqa: PLC0415 - loaded on use

    if public_key is not None and archive_file is None:
        msg = "--public-key checks a signed export: name it with --archive FILE"
        raise OpsUsageError(msg)
    signed = None
    if public_key is not None and archive_file is not None:
        signed = _signed_export(archive_file, public_key)  # before the ledger: a bad file is usage
    ledger = open_ledger()
    with refusals():
        report, archived = _checked(ledger, anchor_file, archive_file, signed)
    if as_json:
        click.echo(views.to_json(views.report_json(report)))
    else:
        _print_report(report, archived, signed)
    if signed is not None and not signed.ok:
        msg = (
            f"the signed export {archive_file!r} is not what was signed: "
            + "; ".join(signed.problems)
            + " (keep the original; this copy proves nothing)"
        )
        raise OpsError(msg)
    if not report.ok:
        first = report.problems[0]
        where = "" if first.seq is None else f" event {first.seq}"
        msg = (
            f"the ledger has been tampered with: {len(report.problems)} problem(s); "
            f"first: operation {first.operation_id!r}{where}: {first.problem}"
        )
        raise OpsError(msg)
    if export_file is not None:
        head = AnchorHead(report.anchored, report.anchor_running)
        with open(export_file, "w", encoding="utf-8") as file:  # noqa: PTH123 - a path from the command line
            file.write(views.to_json(head.to_json()) + "\n")


def _checked(
    ledger: EffectLedger,
    anchor_file: str | None,
    archive_file: str | None,
    signed: SignedExport | None,
) -> tuple[VerifyReport, int | None]:
    """The ledger's report, with what an archive or a signed export adds, and how many they held."""
    from effectguard.ledger import AnchorHead  # noqa: PLC0415 - loaded on use

    expected = None if signed is None else signed.anchor
    if anchor_file is not None:  # the head the operator kept wins over the export's
        with open(anchor_file, encoding="utf-8") as file:  # noqa: PTH123 - a path from the command line
            expected = AnchorHead.loads(file.read())
    report = ledger.verify(anchor=expected)
    if archive_file is None:
        return report, None
    if signed is not None:
        return _with_signed(ledger, report, signed)
    return _with_archive(ledger, report, archive_file)


def _print_report(report: VerifyReport, archived: int | None, signed: SignedExport | None) -> None:
    for problem in report.problems:
        where = "" if problem.seq is None else f" event {problem.seq}"
        click.echo(f"operation {problem.operation_id!r}{where}: {problem.problem}")
    click.echo(f"checked {report.operations_checked} operations and {report.events_checked} events")
    if signed is not None and not signed.ok:
        for broken in signed.problems:
            click.echo(f"export: {broken}")
    elif archived is not None and signed is not None:
        click.echo(
            f"checked {archived} operations of the export signed by key {signed.key_id}"
            f" at {signed.exported_at}"
        )
    elif archived is not None:
        click.echo(f"checked {archived} archived operations against their tombstones")


def _signed_export(archive_file: str, public_key: str) -> SignedExport:
    """The signed export in ``archive_file`` checked against the key in ``public_key``."""
    from effectguard.cli._ops_export import read_key  # noqa: PLC0415 - loaded on use
    from effectguard.errors import InvalidRequestError  # noqa: PLC0415 - loaded on use
    from effectguard.operator import _signing as signing  # noqa: PLC0415 - loaded on use

    with refusals():
        key = signing.load_public_key(read_key(public_key, "--public-key"), public_key)
        try:
            with open(archive_file, "rb") as file:  # noqa: PTH123 - a path from the command line
                return signing.check_signed(file, key)
        except OSError as exc:
            msg = f"cannot read --archive {archive_file!r}: {exc.strerror}"
            raise OpsUsageError(msg) from exc
        except InvalidRequestError as exc:
            msg = f"--archive {archive_file!r}: {exc}"
            raise OpsUsageError(msg) from exc


def _with_signed(
    ledger: EffectLedger, report: VerifyReport, signed: SignedExport
) -> tuple[VerifyReport, int]:
    """``report`` with the signed export's own problems and what the ledger lost of it."""
    import dataclasses  # noqa: PLC0415 - loaded on use

    from effectguard.operator import _signing as signing  # noqa: PLC0415 - loaded on use

    if not signed.ok:  # what an edited file lists proves nothing about the ledger
        return report, len(signed.operations)
    found = signing.compare_with_ledger(signed, ledger)
    return dataclasses.replace(report, problems=(*report.problems, *found)), len(signed.operations)


def _with_archive(
    ledger: object, report: VerifyReport, archive_file: str
) -> tuple[VerifyReport, int]:
    """``report`` with the problems of the chains archived in ``archive_file``, and their count."""
    import dataclasses  # noqa: PLC0415 - loaded on use

    from effectguard.ledger import _retention as retention  # noqa: PLC0415 - loaded on use

    tombstones = getattr(ledger, "tombstones", None)
    if tombstones is None:
        msg = f"{type(ledger).__name__} keeps no tombstones to check an archive against"
        raise OpsError(msg)
    with open(archive_file, encoding="utf-8") as file:  # noqa: PTH123 - a path from the command line
        checked, problems = retention.check_archive(file, tombstones())
    return dataclasses.replace(report, problems=(*report.problems, *problems)), checked


# The recovery, runs, export, prune and console commands live in their own modules; registered
# here, loaded with the group (the console's extra only when `serve` runs).
from effectguard.cli._ops_export import export, keygen  # noqa: E402 - registered after main exists
from effectguard.cli._ops_prune import prune  # noqa: E402 - registered after main exists
from effectguard.cli._ops_recovery import reconcile, reprobe  # noqa: E402 - registered after main exists
from effectguard.cli._ops_runs import runs  # noqa: E402 - registered after main exists
from effectguard.cli._serve import serve  # noqa: E402 - registered after main exists

main.add_command(reprobe)
main.add_command(reconcile)
main.add_command(runs)
main.add_command(export)
main.add_command(keygen)
main.add_command(prune)
main.add_command(serve)

if __name__ == "__main__":
    main()
