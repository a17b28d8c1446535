"""Worker processes that call the same operation as the matrix, at the same moment.

With ``--workers N`` every call round of an episode is made by N processes:
the matrix's own process and N-1 workers started here. Each worker opens its
own handle on the run's ledger (the same SQLite file, or the same PostgreSQL
schema) and the run's :class:`~effectguard.testkit.clock.SharedClock`, and
rebuilds the episode's contract over the same file-backed provider, so the
provider's own count covers every process. A round is sent to every worker
before the matrix's process makes its own call, so the calls overlap: one
claims, the others find a live lease, race to take over an expired one, or
are fenced out.

A worker speaks one JSON line per call on its standard input and output
(:func:`serve`); it is started as ``python -m proofs.matrix.worker``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

from effectguard import EffectExecutor, EffectStatus, LedgerUnavailableError, open_ledger
from effectguard._executor._machine import seeded_jitter
from effectguard.errors import InternalError
from effectguard.testkit._crash import pipes
from effectguard.testkit._crash.child import ChildRun
from effectguard.testkit.clock import SharedClock
from proofs.matrix.contention import FenceCounter

__all__ = ["WorkerAnswer", "WorkerPool", "serve"]

#: Upper bound on one worker's call; reaching it is a failure, not a result.
_ANSWER_SECONDS = 120.0


@dataclass(frozen=True, slots=True)
class WorkerAnswer:
    """What one worker's call ended with."""

    status: str | None
    """The call's status; None when the ledger refused it."""
    fenced: int
    """Writes of this call that were fenced out by another holder's lease."""

    @property
    def met_a_live_lease(self) -> bool:
        """The call found another process working on the operation and left it alone."""
        return self.status == EffectStatus.DISPATCHED.value


class WorkerPool:
    """``count`` worker processes on one ledger and clock; use it as a context manager."""

    def __init__(
        self,
        count: int,
        *,
        target: str,
        clock_path: str,
        seed: int,
        options: dict[str, Any] | None = None,
    ) -> None:
        if count < 0:
            msg = f"a worker pool has >= 0 workers, not {count!r}"
            raise ValueError(msg)
        self.count = count
        self._arguments = (target, clock_path, str(seed), json.dumps(options or {}))
        self._workers: list[subprocess.Popen[str]] = []
        self._sent = False

    def __enter__(self) -> Self:
        for index in range(self.count):
            self._workers.append(
                pipes.start("proofs.matrix.worker", *self._arguments, str(index + 1))
            )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop every worker (each exits when its input closes)."""
        workers, self._workers = self._workers, []
        pipes.stop(*workers)

    def start(self, run: ChildRun) -> None:
        """Send ``run`` to every worker; they call at once, while the caller makes its own call."""
        if self._sent:
            msg = "a worker round was started before the previous one finished"
            raise InternalError(msg)
        line = json.dumps(run.to_json()) + "\n"
        for worker in self._workers:
            if worker.stdin is None:
                msg = "a matrix worker has no input pipe"
                raise InternalError(msg)
            worker.stdin.write(line)
            worker.stdin.flush()
        self._sent = bool(self._workers)

    def finish(self) -> list[WorkerAnswer]:
        """Wait for every worker's answer to the round :meth:`start` sent."""
        if not self._sent:
            return []
        self._sent = False
        return [_answer(worker) for worker in self._workers]


def _answer(worker: subprocess.Popen[str]) -> WorkerAnswer:
    stream = worker.stdout
    if stream is None:
        msg = "a matrix worker has no output pipe"
        raise InternalError(msg)
    line = pipes.read_line(stream, _ANSWER_SECONDS)
    if line is None:
        msg = f"a matrix worker did not answer within {_ANSWER_SECONDS:g}s"
        raise InternalError(msg)
    if not line:
        msg = f"a matrix worker stopped (exit code {worker.poll()}); its traceback is above"
        raise InternalError(msg)
    answer = json.loads(line)
    if answer.get("error"):
        msg = f"a matrix worker's call failed:\n{answer['error']}"
        raise InternalError(msg)
    return WorkerAnswer(status=answer["status"], fenced=int(answer["fenced"]))


def serve(target: str, clock_path: str, seed: int, options: dict[str, Any], index: int) -> None:
    """A worker: for each request line, execute the operation once and answer how it ended."""
    clock = SharedClock(clock_path)
    ledger = FenceCounter(open_ledger(target, clock=clock, **options))
    executor = EffectExecutor(ledger, clock=clock, jitter=seeded_jitter(f"{seed}:worker{index}"))
    try:
        for line in sys.stdin:
            sys.stdout.write(
                json.dumps(_call(ChildRun.from_json(json.loads(line)), executor, ledger))
            )
            sys.stdout.write("\n")
            sys.stdout.flush()
    finally:
        ledger.close()
        clock.close()


def _call(run: ChildRun, executor: EffectExecutor, ledger: FenceCounter) -> dict[str, Any]:
    before = ledger.fenced
    setup = run.setup()
    status: str | None = None
    error = None
    try:
        status = executor.execute(setup.contract, setup.arguments, setup.handler).status.value
    except LedgerUnavailableError:
        status = None
    except Exception:  # noqa: BLE001 - reported to the matrix, which fails the run with it
        error = f"pid {os.getpid()}: {traceback.format_exc()}"
    finally:
        setup.provider.close()
    return {"status": status, "fenced": ledger.fenced - before, "error": error}
