"""The ledger an ``agent-effect-ops`` command works on, and the tools it may need.

The group's ``--db`` is opened on first use (read-only for reads, never
created) and closed with the command; ``--tools`` imports the user's tool
modules, from the current directory as ``python -m`` would, only for the
commands that run a probe or check an output.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

import click

import effectguard
from effectguard.cli._ops_click import F, OpsError, OpsUsageError, refusals

if TYPE_CHECKING:
    from effectguard import EffectLedger
    from effectguard.ledger import OperationRecord
    from effectguard.operator import ToolIndex

__all__ = ["Session", "load_tools", "open_ledger", "operation", "tools_option"]

_POSTGRES_SCHEMES = ("postgresql://", "postgres://")
_SHOWN = 60


class Session:
    """The group's options; the ledger is opened on first use and closed with the context."""

    # A plain class, not a dataclass: importing dataclasses is a visible part of --help's time.
    __slots__ = ("busy_timeout", "ledger", "target")

    def __init__(self, target: str | None, busy_timeout: float) -> None:
        self.target = target
        self.busy_timeout = busy_timeout
        self.ledger: EffectLedger | None = None

    def open(self, ctx: click.Context, *, write: bool) -> EffectLedger:
        if self.ledger is not None:
            return self.ledger
        if not self.target:
            hint = f"see '{ctx.find_root().command_path} --help'"
            msg = f"Missing option '--db': name the ledger file or postgresql:// URL ({hint})"
            raise OpsUsageError(msg)
        # A missing ledger is an error for every command: none of them can succeed on an
        # empty ledger, and a read must never leave a new file (or schema) behind.
        options: dict[str, Any] = {"create": False}
        if not self.target.startswith(_POSTGRES_SCHEMES):
            options["busy_timeout"] = self.busy_timeout
            # A read opens the file read-only, so it works on a ledger this user may only read.
            options["read_only"] = not write
        if "\0" in self.target:
            msg = "--db contains a NUL byte: no file or URL can be named that"
            raise OpsUsageError(msg)
        try:
            with refusals():
                ledger = effectguard.open_ledger(self.target, **options)
        except OSError as exc:  # a name the OS refuses outright (ENAMETOOLONG, ELOOP)
            shown = self.target if len(self.target) <= _SHOWN else f"{self.target[:_SHOWN]}..."
            msg = f"--db {shown!r}: {exc.strerror or exc}"
            raise OpsUsageError(msg) from exc
        ctx.call_on_close(ledger.close)
        self.ledger = ledger
        return ledger


def open_ledger(*, write: bool = False) -> EffectLedger:
    ctx = click.get_current_context()
    session = ctx.find_object(Session)
    if session is None:  # pragma: no cover - main() always installs one
        msg = "agent-effect-ops commands run only under the agent-effect-ops group"
        raise RuntimeError(msg)
    return session.open(ctx, write=write)


def operation(ledger: EffectLedger, operation_id: str) -> OperationRecord:
    with refusals():
        record = ledger.get(operation_id)
    if record is None:
        find = getattr(ledger, "tombstone", None)
        with refusals():
            stone = None if find is None else find(operation_id)
        msg = (
            f"no operation {operation_id!r} in the ledger"
            if stone is None
            else f"operation {operation_id!r} was {stone.status.value} and pruned at "
            f"{stone.pruned_at.isoformat()}: only its tombstone is left (read the prune's archive)"
        )
        raise OpsError(msg)
    return record


def tools_option(command: F) -> F:
    """Add ``--tools MODULE[,MODULE]`` (or ``EFFECTGUARD_TOOLS``): where the decorated tools are."""
    return click.option(
        "--tools",
        "tools",
        envvar="EFFECTGUARD_TOOLS",
        metavar="MODULE[,MODULE]",
        help="Import these modules and use their @effect tools (probes, return types).",
    )(command)


def load_tools(modules: str | None) -> ToolIndex | None:
    """Import ``modules`` (comma-separated) and index their tools; None when none are named."""
    if not modules or not modules.strip():
        return None
    # A console script's sys.path lacks the working directory; `python -m` would have it.
    here = os.getcwd()  # noqa: PTH109 - a plain string for sys.path
    if here not in sys.path:
        sys.path.insert(0, here)
    from effectguard import operator as operator_api  # noqa: PLC0415 - loaded on use

    with refusals():
        return operator_api.load_tools(modules)
