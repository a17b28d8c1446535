"""What one bench run measures: backend, sizes and where its data lives."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BACKENDS", "DEFAULT_OPS", "FULL_LEDGER_SIZE", "BenchConfig", "BenchError"]

#: The backends a bench can run against.
BACKENDS = ("sqlite", "postgres")
#: Calls per round of each measurement in a full run.
DEFAULT_OPS = 1000
#: Operations in the large ledger of a full run.
FULL_LEDGER_SIZE = 1_000_000


class BenchError(Exception):
    """The bench cannot run as configured (an unreachable database, a bad directory)."""


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """One run: ``ops`` calls per round, ``rounds`` rounds, a ledger of ``ledger_size`` operations.

    ``ledger_size`` None scales the full run's 1,000,000 operations in
    proportion to ``ops`` (at most 1,000,000), so a small CI run stays small.
    ``db`` is a directory for SQLite's files (default: the system's temporary
    directory) or a ``postgresql://`` URL of a database to make schemas in.
    """

    backend: str = "sqlite"
    ops: int = DEFAULT_OPS
    rounds: int = 5
    ledger_size: int | None = None
    db: str | None = None

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            msg = f"backend must be one of {', '.join(BACKENDS)}, not {self.backend!r}"
            raise BenchError(msg)
        for name in ("ops", "rounds"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                msg = f"{name} must be an int >= 1, not {value!r}"
                raise BenchError(msg)
        if self.ledger_size is not None and self.ledger_size < 1:
            msg = f"ledger_size must be >= 1, not {self.ledger_size!r}"
            raise BenchError(msg)

    @property
    def big_ledger_size(self) -> int:
        """Operations in the large ledger this run builds."""
        if self.ledger_size is not None:
            return self.ledger_size
        return min(FULL_LEDGER_SIZE, FULL_LEDGER_SIZE * self.ops // DEFAULT_OPS)
