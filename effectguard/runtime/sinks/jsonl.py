"""Appending JSON lines to a file that only its owner can read."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

__all__ = ["JsonLinesFile"]


class JsonLinesFile:
    """An append-only JSON-lines file, created 0600, written one whole line at a time.

    Lines from several threads never interleave. With ``fsync=True`` each
    line is on disk before :meth:`append` returns.
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self._lock = threading.Lock()
        # O_APPEND makes each write land at the end even with several writers.
        self._fd: int | None = os.open(
            self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0), 0o600
        )

    def append(self, document: dict[str, Any]) -> None:
        """Write ``document`` as one line."""
        line = (json.dumps(document, ensure_ascii=False, default=str) + "\n").encode()
        with self._lock:
            if self._fd is None:
                msg = f"{self.path} is closed"
                raise ValueError(msg)
            view = memoryview(line)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
            if self.fsync:
                os.fsync(self._fd)

    def close(self) -> None:
        """Close the file; closing twice does nothing."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
