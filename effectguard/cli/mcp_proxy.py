"""``agent-effect-mcp-proxy``: an MCP server you did not write, its write tools guarded.

Serves the tools of ``--upstream`` over stdio to the MCP client that starts
it; the write tools named in ``--contracts`` go through the ledger at
``--db`` (see :mod:`effectguard.adapters.mcp_proxy`). A contracts file with
mistakes is refused before anything is served: one line per mistake on
stderr, exit 2, no tool called upstream and no ledger created.
"""

from __future__ import annotations

import logging
import sys
from typing import NoReturn

import click

import effectguard
from effectguard.cli._ops_click import EXIT_REFUSED, EXIT_USAGE, OpsCommand

__all__ = ["main"]

EXIT_CODES_HELP = """\b
Exit codes:
  0  the client closed the session
  1  the upstream or the ledger could not be reached
  2  usage error: a contracts file with mistakes (one line each), a bad option"""


def _fail(lines: list[str] | tuple[str, ...], code: int) -> NoReturn:
    for line in lines:
        click.echo(f"agent-effect-mcp-proxy: {line}", err=True)
    sys.exit(code)


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first error an exception group holds (anyio's task groups wrap what they raise)."""
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


@click.command(
    cls=OpsCommand,  # a usage error is one line, as in agent-effect-ops
    epilog=EXIT_CODES_HELP,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.option(
    "--contracts",
    "contracts_path",
    required=True,
    metavar="FILE",
    help="The TOML file naming the upstream's write tools and how to settle their outcomes.",
)
@click.option(
    "--upstream",
    required=True,
    metavar="CMD|URL",
    help="The MCP server to front: a command line (stdio) or an http(s):// URL.",
)
@click.option(
    "--db",
    "target",
    required=True,
    metavar="PATH|URL",
    help="The ledger: a SQLite file (created if missing) or a postgresql:// URL.",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    default="warning",
    show_default=True,
    help="What the proxy logs on stderr (stdout is the MCP session).",
)
@click.version_option(effectguard.__version__, prog_name="agent-effect-mcp-proxy")
def main(contracts_path: str, upstream: str, target: str, log_level: str) -> None:
    """Front the MCP server UPSTREAM; run its write tools through the effect ledger.

    Every tool of the upstream is offered unchanged. A call of a tool the
    contracts file names is recorded before it is sent, sent once per
    operation (a retry replays the first answer), and reconciled with the
    file's probe when its answer is lost; what cannot be settled waits for an
    operator (agent-effect-ops). Any other call is forwarded untouched.
    """
    logging.basicConfig(level=log_level.upper(), stream=sys.stderr)
    try:
        import anyio  # noqa: PLC0415 - only with the extra, for a one-line error without it

        from effectguard.adapters import mcp_proxy  # noqa: PLC0415 - ditto
    except ImportError as exc:
        _fail([f"{exc}"], EXIT_USAGE)
    try:
        contracts = mcp_proxy.load_contracts(contracts_path)
        try:
            anyio.run(
                lambda: mcp_proxy.serve(contracts_path, upstream, target, contracts=contracts)
            )
        except BaseExceptionGroup as group:
            raise _first(group) from group
    except mcp_proxy.ContractsError as exc:
        _fail(exc.problems, EXIT_USAGE)
    except effectguard.ConfigurationError as exc:
        _fail([str(exc)], EXIT_USAGE)
    except (effectguard.LedgerError, OSError) as exc:
        _fail([f"cannot serve: {exc}"], EXIT_REFUSED)
