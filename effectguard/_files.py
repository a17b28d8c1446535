"""Files effectguard creates: private to their owner from the first byte."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["create_private_file"]


def create_private_file(path: Path) -> None:
    """Create ``path`` empty with mode 0600, unless it already exists.

    Creating the file before SQLite opens it matters: SQLite would create it
    0644, and its -wal and -shm files copy the database file's mode. Raises
    ``OSError`` when the file cannot be created.
    """
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    os.close(fd)
