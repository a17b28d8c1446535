"""What every ``agent-effect`` command shares: exit statuses, bad input, JSON report files."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import click

__all__ = ["INVARIANT_BROKEN", "OUTPUT", "BadInput", "check_output", "write_json", "write_text"]

#: Exit status when an invariant broke (a duplicate, a lost confirmation, a failed call).
INVARIANT_BROKEN = 1

#: The type of every ``--output`` option: a file path.
OUTPUT = click.Path(dir_okay=False, path_type=Path)


class BadInput(click.ClickException):
    """Input that cannot be run as given; exit status 2, nothing recorded."""

    exit_code = 2


def check_output(output: Path | None, *, force: bool = False) -> None:
    """Refuse an ``--output`` that cannot be written, or exists (unless ``force``), up front."""
    if output is None:
        return
    try:
        if output.is_dir():
            msg = f"--output {output} is a directory"
            raise BadInput(msg)
        if not output.parent.is_dir():
            msg = f"--output {output}: directory {output.parent} does not exist"
            raise BadInput(msg)
        if not force and (output.exists() or output.is_symlink()):
            msg = f"--output {output} already exists; choose another path, or pass --force"
            raise BadInput(msg)
    except OSError as exc:  # a name too long, a directory that cannot be searched
        msg = f"--output {str(output)[:80]}: {exc.strerror or exc}"
        raise BadInput(msg) from exc


def write_json(output: Path, data: dict[str, Any], *, force: bool = False) -> None:
    """Write ``data`` to ``output`` as indented JSON, whole or not at all.

    The report goes to a temporary file beside ``output`` and is renamed onto
    it: a reader never sees half a report. An existing ``output`` is replaced
    only with ``force`` (one created meanwhile is refused too). BadInput if
    the file cannot be written; nothing is left behind then.
    """
    write_text(output, json.dumps(data, indent=2) + "\n", force=force)


def write_text(output: Path, text: str, *, force: bool = False) -> None:
    """Write ``text`` to ``output`` whole or not at all, as :func:`write_json` does."""
    try:
        handle, name = tempfile.mkstemp(prefix=f".{output.name}.", dir=output.parent)
        temporary = Path(name)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as stream:
                stream.write(text)
            if force:
                temporary.replace(output)
            else:
                output.hardlink_to(temporary)  # fails if output appeared meanwhile
                temporary.unlink()
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
    except FileExistsError as exc:
        msg = f"--output {output} already exists; choose another path, or pass --force"
        raise BadInput(msg) from exc
    except OSError as exc:
        msg = f"cannot write the report to {output}: {exc.strerror or exc}"
        raise BadInput(msg) from exc
