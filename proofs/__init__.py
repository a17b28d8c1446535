"""The project's own proofs, run from a checkout and by CI, not shipped in the wheel.

``python -m proofs.matrix`` plays the seeded fault matrix; ``python -m proofs.study``
plays the strategy study. Both count the effects the fake providers committed.
"""

from __future__ import annotations

import logging
import os
import sys

import click

__all__ = ["run_command"]


def run_command(command: click.Command, name: str) -> None:
    """Run a proof's Click command as a program named ``python -m name``.

    The proofs make effects fail on purpose, so the library's log lines reach
    stderr only from the level ``EFFECTGUARD_LOG_LEVEL`` names (ERROR by default).
    """
    level = os.environ.get("EFFECTGUARD_LOG_LEVEL", "ERROR").upper()
    if level not in logging.getLevelNamesMapping():
        sys.stderr.write(f"{name}: EFFECTGUARD_LOG_LEVEL={level!r} is not a logging level\n")
        sys.exit(2)
    logging.basicConfig(format="%(name)s %(levelname)s %(message)s")
    logging.getLogger("effectguard").setLevel(level)
    command(prog_name=f"python -m {name}")
