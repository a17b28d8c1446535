"""``agent-effect-ops serve``: the browser console (needs the ``console`` extra)."""

from __future__ import annotations

import getpass
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

import effectguard
from effectguard.cli._ops_click import OpsError, OpsUsageError, refusals

if TYPE_CHECKING:
    from effectguard._decorator import ToolIndex
    from effectguard.ledger import EffectLedger

__all__ = ["serve"]

_POSTGRES_SCHEMES = ("postgresql://", "postgres://")


@click.command(short_help="Serve the operator console in a browser (needs effectguard[console]).")
@click.option("--db", "target", metavar="PATH|URL", help="The ledger (or give --db before serve).")
@click.option(
    "--checkpoints",
    type=click.Path(dir_okay=False, exists=True),
    metavar="PATH",
    help="A runtime checkpoint file: show the runs that wait on operations.",
)
@click.option(
    "--tools",
    metavar="MODULE[,MODULE]",
    help="Modules defining the decorated tools: check outputs and allow re-probes "
    "(default: $EFFECTGUARD_TOOLS).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True)
@click.option("--read-only", is_flag=True, help="Serve no write routes at all.")
@click.option("--actor", metavar="WHO", help="Your name, recorded on every resolution.")
@click.option("--allow-remote", is_flag=True, help="Allow a non-loopback --host.")
@click.option("--tls-cert", type=click.Path(dir_okay=False, exists=True), metavar="FILE")
@click.option("--tls-key", type=click.Path(dir_okay=False, exists=True), metavar="FILE")
@click.pass_context
def serve(
    ctx: click.Context,
    target: str | None,
    checkpoints: str | None,
    tools: str | None,
    host: str,
    port: int,
    read_only: bool,
    actor: str | None,
    allow_remote: bool,
    tls_cert: str | None,
    tls_key: str | None,
) -> None:
    """Serve a web console over the ledger: what needs a person, and audited resolutions.

    It listens on 127.0.0.1 unless told otherwise and prints a URL carrying a
    random access token, required on every request. Resolutions are recorded
    with --actor (default: your login name) beside this process's OS account.
    """
    root = ctx.find_root().params
    target = target or root.get("target")
    if not target:
        msg = "Missing option '--db': name the ledger file or postgresql:// URL"
        raise OpsUsageError(msg)
    if (tls_cert is None) != (tls_key is None):
        msg = "give --tls-cert and --tls-key together"
        raise OpsUsageError(msg)
    try:
        from effectguard.console import ConsoleSettings  # noqa: PLC0415 - an optional extra
        from effectguard.console import serve as run_console  # noqa: PLC0415 - an optional extra
        from effectguard.console.security import new_token  # noqa: PLC0415 - an optional extra
    except ImportError as exc:
        raise OpsError(str(exc)) from exc
    _check_host(host, allow_remote=allow_remote, tls=tls_cert is not None)
    with refusals():
        index = _load_tools(tools)
        ledger = _open(target, root.get("busy_timeout", 10.0), read_only=read_only)
    settings = ConsoleSettings(
        ledger=ledger,
        token=new_token(),
        actor=(actor or getpass.getuser()).strip(),
        read_only=read_only,
        checkpoints=checkpoints,
        tools=index,
    )

    def ready(url: str) -> None:
        mode = "read-only" if read_only else f"acting as {settings.actor!r}"
        click.echo(f"effectguard console ({mode}) for {target}")
        if index is None and not read_only:
            click.echo("warning: without --tools, confirmed outputs are unchecked", err=True)
        click.echo(f"open {url}", nl=True)
        sys.stdout.flush()  # a script reading the URL must not wait for the buffer

    try:
        with refusals():
            run_console(
                settings, host=host, port=port, tls_cert=tls_cert, tls_key=tls_key, ready=ready
            )
    except OSError as exc:
        msg = f"cannot listen on {host}:{port}: {exc.strerror or exc}"
        raise OpsError(msg) from exc
    finally:
        ledger.close()


def _check_host(host: str, *, allow_remote: bool, tls: bool) -> None:
    """Refuse a host the console may not listen on; warn about one it should not."""
    from effectguard.console.server import check_host  # noqa: PLC0415 - an optional extra

    try:
        warning = check_host(host, allow_remote=allow_remote, tls=tls)
    except ValueError as exc:
        raise OpsUsageError(str(exc)) from exc
    if warning is not None:
        click.echo(f"warning: {warning}", err=True)


def _open(target: str, busy_timeout: float, *, read_only: bool) -> EffectLedger:
    """Open the ledger ``target`` names, never creating it; read-only when asked (SQLite)."""
    options: dict[str, object] = {"create": False}
    if not target.startswith(_POSTGRES_SCHEMES):
        if Path(target).is_dir():
            msg = f"--db {target!r} is a directory, not a ledger file"
            raise OpsError(msg)
        options["busy_timeout"] = busy_timeout
        options["read_only"] = read_only
    return effectguard.open_ledger(target, **options)


def _load_tools(tools: str | None) -> ToolIndex | None:
    """The tools named by --tools or $EFFECTGUARD_TOOLS, or None when neither names any."""
    from effectguard._decorator import TOOLS_VARIABLE, load_tools  # noqa: PLC0415 - on use

    if not (tools or os.environ.get(TOOLS_VARIABLE, "").strip()):
        return None
    return load_tools(tools)
