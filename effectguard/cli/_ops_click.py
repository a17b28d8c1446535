"""Click plumbing for ``agent-effect-ops``: one-line errors, exit codes, shared options.

Click prints a usage block above a usage error; an operator's terminal or a
pager-less log wants one line naming the problem, so every usage error is
re-raised as :class:`OpsUsageError`. Library errors become :class:`OpsError`
(exit 1) or, for malformed requests, :class:`OpsUsageError` (exit 2).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from effectguard import EffectGuardError, InvalidRequestError

if TYPE_CHECKING:
    from effectguard import EffectStatus

__all__ = [
    "EXIT_CODES_HELP",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_USAGE",
    "LIMIT",
    "MAX_LIMIT",
    "OpsCommand",
    "OpsError",
    "OpsGroup",
    "OpsUsageError",
    "audit_options",
    "bounded_seconds",
    "expect_options",
    "json_option",
    "non_empty",
    "one_line",
    "parse_json",
    "parse_status",
    "refusals",
    "unusable_paths",
]

#: The command did what was asked.
EXIT_OK = 0
#: The ledger refused the request, or lacks what it names (operation, file, intact chain).
EXIT_REFUSED = 1
#: The command line is wrong (unknown option or status, malformed JSON, missing audit field).
EXIT_USAGE = 2

EXIT_CODES_HELP = """\b
Exit codes:
  0  done
  1  refused or not found: unknown operation, illegal transition, live
     lease, missing/foreign/newer/locked ledger, broken hash chain
  2  usage error: bad option or status, malformed JSON, missing audit field"""

F = TypeVar("F", bound=Callable[..., Any])

#: The most operations one command lists, exports or sweeps per batch.
MAX_LIMIT = 1_000_000_000

#: The type of every ``--limit``: a whole number from 1 to :data:`MAX_LIMIT`.
LIMIT = click.IntRange(min=1, max=MAX_LIMIT)


def bounded_seconds(
    low: float, high: float
) -> Callable[[click.Context, click.Parameter, float | None], float | None]:
    """An option callback: finite seconds from ``low`` to ``high``, else a usage error."""

    def check(
        ctx: click.Context,  # noqa: ARG001 - Click's callback signature
        param: click.Parameter,  # noqa: ARG001 - Click's callback signature
        value: float | None,
    ) -> float | None:
        if value is None:
            return None
        if not low <= value <= high:  # also NaN, which compares false with everything
            msg = f"{value!r} is not a number of seconds from {low:g} to {high:g}"
            raise click.BadParameter(msg)
        return value

    return check


def one_line(text: str) -> str:
    """``text`` on one line, each very long word (a pasted value, a path) cut to its start."""
    return " ".join(_cut(word) for word in str(text).split())


_LONGEST_WORD = 120


def _cut(word: str) -> str:
    if len(word) <= _LONGEST_WORD:
        return word
    return f"{word[: _LONGEST_WORD - 40]}...({len(word)} characters)"


class OpsError(click.ClickException):
    """The ledger refused the request or lacks what it names: exit 1, one line on stderr."""

    exit_code = EXIT_REFUSED

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


class OpsUsageError(click.ClickException):
    """The command line is wrong: exit 2, one line on stderr (Click's usage text is left out)."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


@contextlib.contextmanager
def _one_line_usage(ctx: click.Context) -> Iterator[None]:
    try:
        yield
    except click.exceptions.NoArgsIsHelpError:
        raise
    except click.UsageError as exc:
        message = exc.format_message().rstrip(".")
        raise OpsUsageError(f"{message} (see '{ctx.command_path} --help')") from exc


class OpsCommand(click.Command):
    """A command whose usage errors are one line, and whose help lists the exit codes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("epilog", EXIT_CODES_HELP)
        super().__init__(*args, **kwargs)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        given = list(args)  # Click consumes the list it parses
        with _one_line_usage(ctx):
            try:
                return super().parse_args(ctx, args)
            except click.MissingParameter as exc:
                missing = self._missing(given)
                if len(missing) < 2:  # noqa: PLR2004 - one missing option: Click's own message
                    raise
                names = ", ".join(f"'{name}'" for name in missing)
                msg = f"Missing options {names}"
                raise click.UsageError(msg, ctx) from exc

    def _missing(self, args: list[str]) -> list[str]:
        """Every required option neither on the command line nor in its environment variable."""
        given = {arg.split("=", 1)[0] for arg in args if arg.startswith("-")}
        missing = []
        for param in self.params:
            if not isinstance(param, click.Option) or not param.required:
                continue
            envvar = param.envvar if isinstance(param.envvar, str) else None
            if given.isdisjoint(param.opts) and not (envvar and os.environ.get(envvar)):
                missing.append(param.opts[0])
        return missing


class OpsGroup(click.Group):
    """A group whose usage errors, and its commands' by default, are one line."""

    command_class = OpsCommand

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
        with _one_line_usage(ctx), unusable_paths():
            return super().invoke(ctx)


@contextlib.contextmanager
def unusable_paths() -> Iterator[None]:
    """Turn a path the OS cannot use (a NUL byte, a name too long, no such directory) into one line.

    The last line of defence for file options: each names the path it could
    not use, exit 2, and nothing has been written.
    """
    try:
        yield
    except ValueError as exc:
        if "null byte" not in str(exc):
            raise
        msg = "a path given contains a NUL byte: no file can be named that"
        raise OpsUsageError(msg) from exc
    except OSError as exc:
        if isinstance(exc, (ConnectionError, TimeoutError, InterruptedError)):
            raise
        name = exc.filename if exc.filename is not None else ""
        msg = f"cannot use {str(name)!r}: {exc.strerror or exc}; nothing was written"
        raise OpsUsageError(msg) from exc


@contextlib.contextmanager
def refusals() -> Iterator[None]:
    """Turn the library's errors into one-line CLI errors with the documented exit codes."""
    try:
        yield
    except InvalidRequestError as exc:
        raise OpsUsageError(str(exc)) from exc
    except EffectGuardError as exc:
        raise OpsError(str(exc)) from exc


def parse_status(
    ctx: click.Context,  # noqa: ARG001 - Click's callback signature
    param: click.Parameter,  # noqa: ARG001 - Click's callback signature
    value: str | None,
) -> EffectStatus | None:
    """Option callback: the status ``value`` names in any case (``all``: any), or a usage error."""
    # A callback rather than a ParamType subclass: ParamType is generic only in newer Click.
    if value is None or value.strip().lower() == "all":  # as `runs list --status all` takes it
        return None
    # Imported on use: the model is not needed to print --help.
    from effectguard import EffectStatus  # noqa: PLC0415 - see above

    try:
        return EffectStatus.parse(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


def parse_json(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:  # noqa: ARG001 - Click's callback signature
    """Option callback: the JSON value in ``value`` (None if not given); NaN, Infinity refused."""
    if value is None:
        return None

    def refuse(constant: str) -> NoReturn:
        msg = f"{constant} is not a JSON number"
        raise ValueError(msg)

    try:
        return json.loads(value, parse_constant=refuse)
    except ValueError as exc:
        msg = f"not valid JSON: {exc}"
        raise click.BadParameter(msg) from exc
    except RecursionError as exc:
        msg = "not storable JSON: it is nested too deeply"
        raise click.BadParameter(msg) from exc


def non_empty(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:  # noqa: ARG001 - Click's callback signature
    """Option callback: ``value`` unless it is empty or only whitespace (None when not given)."""
    if value is not None and not value.strip():
        msg = "must not be empty"
        raise click.BadParameter(msg)
    return value


def audit_options(command: F) -> F:
    """Add the three audit options every operator write requires."""
    for name, metavar, text in reversed(
        (
            ("--actor", "WHO", "Who is resolving this (your name or on-call handle)."),
            ("--reason", "WHY", "Why, in a sentence a later reader understands."),
            ("--evidence-reference", "REF", "Where the evidence is: ticket, link, case id."),
        )
    ):
        command = click.option(name, required=True, metavar=metavar, callback=non_empty, help=text)(
            command
        )
    return command


def _event_count(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:  # noqa: ARG001 - Click's callback signature
    """Option callback: a whole number of events of at least 1 (read as text: no overflow)."""
    if value is None:
        return None
    text = value.strip()
    if not text.isdigit() or len(text) > _MAX_COUNT_DIGITS or int(text) < 1:
        msg = (
            f"{value[:40]!r} is not an event count (a whole number, at least 1, as show prints it)"
        )
        raise click.BadParameter(msg)
    return int(text)


_MAX_COUNT_DIGITS = 18  # below 2**63: any count a ledger can hold


def expect_options(command: F) -> F:
    """Add ``--expect-events`` and ``--expect-head``: the state the decision is made on."""
    command = click.option(
        "--expect-head",
        metavar="HEAD",
        help="Refuse unless the operation's chain head still starts with HEAD (show prints it).",
    )(command)
    return click.option(
        "--expect-events",
        metavar="N",
        callback=_event_count,
        help="Refuse unless the operation still has exactly N events (show prints N).",
    )(command)


def json_option(command: F) -> F:
    """Add ``--json``, which prints machine-readable output instead of text."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON for machines.")(command)
