"""What every ``agent-effect`` command shares: exit statuses, bad input, JSON report files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

__all__ = ["INVARIANT_BROKEN", "OUTPUT", "BadInput", "check_output", "write_json"]

#: Exit status when an invariant broke (a duplicate, a lost confirmation, a failed call).
INVARIANT_BROKEN = 1

#: The type of every ``--output`` option: a file path.
OUTPUT = click.Path(dir_okay=False, path_type=Path)


class BadInput(click.ClickException):
    """Input that cannot be run as given; exit status 2, nothing recorded."""

    exit_code = 2


def check_output(output: Path | None) -> None:
    """Refuse an ``--output`` that cannot be written, before anything runs."""
    if output is None:
        return
    if output.is_dir():
        msg = f"--output {output} is a directory"
        raise BadInput(msg)
    if not output.parent.is_dir():
        msg = f"--output {output}: directory {output.parent} does not exist"
        raise BadInput(msg)


def write_json(output: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``output`` as indented JSON; BadInput if the file cannot be written."""
    try:
        output.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        msg = f"cannot write the report to {output}: {exc.strerror or exc}"
        raise BadInput(msg) from exc
