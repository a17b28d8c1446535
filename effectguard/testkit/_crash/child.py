"""Run one effect in a real child process that a fault may kill with SIGKILL.

The child opens its own handles on the file-backed ledger and provider, so
nothing it leaves behind is simulated: a claim it committed, a provider effect
it committed, a lease whose owner is gone. Children are forked by a helper
interpreter (``python -m effectguard.testkit._crash.helper``) that has imported the
library but opened no database: SQLite connections, and SQLite's per-process
lock tables, must never cross ``fork()``, and forking from the helper is far
faster than starting an interpreter per child. The helper speaks one JSON line
per run on its standard input and output.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from effectguard._executor import EffectExecutor
from effectguard._executor._machine import seeded_jitter
from effectguard.ledger import open_ledger
from effectguard.testkit._crash import pipes
from effectguard.testkit._crash.kinds import ContractKind, Service, Setup, build_setup
from effectguard.testkit.clock import ManualClock, SharedClock
from effectguard.testkit.faults import Fault, FaultPlan

__all__ = ["ChildExit", "ChildRun", "ChildRunner", "run_child", "serve"]

_FAILED = 3
_TIMED_OUT = "timed out"


@dataclass(frozen=True, slots=True)
class ChildRun:
    """Everything a child needs to rebuild the effect and execute it once.

    ``ledger_path`` is what :func:`~effectguard.ledger.open_ledger` takes: a
    SQLite file or a ``postgresql://`` URL. With ``clock_path`` the child reads
    the run's :class:`~effectguard.testkit.clock.SharedClock`; without, a
    manual clock starting at ``now``.
    """

    ledger_path: str
    provider_path: str
    kind: ContractKind
    service: Service
    subject: str
    faults: FaultPlan
    now: float
    visible_after_reads: int = 2
    amount_cents: int = 1999
    lease_seconds: float = 30.0
    broken_key: bool = False
    clock_path: str | None = None
    ledger_options: dict[str, Any] = field(default_factory=dict)
    """Keyword options for :func:`~effectguard.ledger.open_ledger` (``synchronous=`` on SQLite)."""

    def to_json(self) -> dict[str, Any]:
        """Return the JSON form the helper reads."""
        return {
            "ledger_path": self.ledger_path,
            "provider_path": self.provider_path,
            "kind": self.kind.value,
            "service": self.service.value,
            "subject": self.subject,
            "faults": {str(n): fault.value for n, fault in self.faults.faults.items()},
            "pending_probes": self.faults.pending_probes,
            "now": self.now,
            "visible_after_reads": self.visible_after_reads,
            "amount_cents": self.amount_cents,
            "lease_seconds": self.lease_seconds,
            "broken_key": self.broken_key,
            "clock_path": self.clock_path,
            "ledger_options": self.ledger_options,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ChildRun:
        """Rebuild a run from :meth:`to_json` output."""
        faults = FaultPlan(
            {int(n): Fault(value) for n, value in data["faults"].items()},
            pending_probes=int(data["pending_probes"]),
        )
        return cls(
            ledger_path=str(data["ledger_path"]),
            provider_path=str(data["provider_path"]),
            kind=ContractKind(data["kind"]),
            service=Service(data["service"]),
            subject=str(data["subject"]),
            faults=faults,
            now=float(data["now"]),
            visible_after_reads=int(data["visible_after_reads"]),
            amount_cents=int(data["amount_cents"]),
            lease_seconds=float(data["lease_seconds"]),
            broken_key=bool(data["broken_key"]),
            clock_path=data.get("clock_path"),
            ledger_options=dict(data.get("ledger_options") or {}),
        )

    def setup(self) -> Setup:
        """The provider, contract, arguments and handler this run executes, rebuilt from it.

        Every process that executes a run (a crash child, a contending worker)
        builds it here, so they all call the same effect on the same provider.
        """
        return build_setup(
            self.kind,
            self.service,
            self.subject,
            faults=self.faults,
            path=self.provider_path,
            visible_after_reads=self.visible_after_reads,
            amount_cents=self.amount_cents,
            lease_seconds=self.lease_seconds,
            broken_key=self.broken_key,
        )


@dataclass(frozen=True, slots=True)
class ChildExit:
    """How the child ended: ``killed`` means by SIGKILL, before its execute returned."""

    killed: bool
    exitcode: int


class ChildRunner:
    """A helper process that forks one child per :meth:`run`; use it as a context manager."""

    def __init__(self, *, timeout: float = 60.0, preload: tuple[str, ...] = ()) -> None:
        self.timeout = timeout
        self.preload = preload
        """Modules the helper imports before forking, so no child pays for importing them."""
        self._helper: subprocess.Popen[str] | None = None

    def __enter__(self) -> Self:
        if not hasattr(os, "fork"):
            msg = "crash runs need os.fork() (a POSIX system)"
            raise RuntimeError(msg)
        self._helper = pipes.start("effectguard.testkit._crash.helper", *self.preload)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop the helper (it exits when its input closes)."""
        helper, self._helper = self._helper, None
        if helper is not None:
            pipes.stop(helper)

    def run(self, run: ChildRun) -> ChildExit:
        """Execute ``run`` in a new child and wait until it ends or is killed.

        Raises ``RuntimeError`` when the child fails for any reason other than a
        SIGKILL, or does not finish within the runner's timeout.
        """
        helper = self._helper
        if helper is None or helper.stdin is None or helper.stdout is None:
            msg = "the child runner is not started (use it as a context manager)"
            raise RuntimeError(msg)
        error_path = f"{run.provider_path}.child-error"
        request = {"run": run.to_json(), "error_path": error_path, "timeout": self.timeout}
        helper.stdin.write(json.dumps(request) + "\n")
        helper.stdin.flush()
        line = pipes.read_line(helper.stdout, self.timeout + 10)
        if line is None:
            msg = f"the crash helper did not answer within {self.timeout + 10:g}s"
            raise RuntimeError(msg)
        if not line:
            msg = f"the crash helper process stopped (exit code {helper.poll()})"
            raise RuntimeError(msg)
        answer = json.loads(line)
        exitcode = answer["exitcode"]
        if exitcode == _TIMED_OUT:
            msg = f"the child executing {run.subject!r} did not finish within {self.timeout:g}s"
            raise RuntimeError(msg)
        if exitcode == _FAILED:
            error = Path(error_path)
            detail = error.read_text(encoding="utf-8") if error.exists() else "(no traceback)"
            msg = f"the child executing {run.subject!r} failed:\n{detail}"
            raise RuntimeError(msg)
        if exitcode not in (0, -signal.SIGKILL):
            msg = f"the child executing {run.subject!r} ended with exit code {exitcode}"
            raise RuntimeError(msg)
        return ChildExit(killed=exitcode == -signal.SIGKILL, exitcode=exitcode)


def run_child(run: ChildRun, *, timeout: float = 60.0) -> ChildExit:
    """Execute ``run`` in one child process (starting and stopping a helper for it)."""
    with ChildRunner(timeout=timeout) as runner:
        return runner.run(run)


# -- the helper and its children ----------------------------------------------------------


def _execute(run: ChildRun, error_path: str) -> None:
    """The child's whole life: execute once, then leave without any teardown."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)  # standard output is the helper's answer channel
        clock = ManualClock(run.now) if run.clock_path is None else SharedClock(run.clock_path)
        ledger = open_ledger(run.ledger_path, clock=clock, **run.ledger_options)
        setup = run.setup()
        executor = EffectExecutor(ledger, clock=clock, jitter=seeded_jitter(run.subject))
        executor.execute(setup.contract, setup.arguments, setup.handler)
    except BaseException:  # noqa: BLE001 - reported to the parent through the error file
        Path(error_path).write_text(traceback.format_exc(), encoding="utf-8")
        os._exit(_FAILED)
    os._exit(0)


def _wait(pid: int, timeout: float) -> int | str:
    """Wait for child ``pid``; kill it after ``timeout`` seconds. Returns its exit code."""
    deadline = time.monotonic() + timeout
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is not None:
        fd = pidfd_open(pid)
        try:
            ready, _, _ = select.select([fd], [], [], timeout)
        finally:
            os.close(fd)
        if not ready:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return _TIMED_OUT
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return _TIMED_OUT
        time.sleep(0.001)


def serve() -> None:
    """The helper: for each request line, fork a child, reap it, answer its exit code."""
    for line in sys.stdin:
        request = json.loads(line)
        run = ChildRun.from_json(request["run"])
        pid = os.fork()
        if pid == 0:
            _execute(run, request["error_path"])
        exitcode = _wait(pid, float(request["timeout"]))
        sys.stdout.write(json.dumps({"exitcode": exitcode}) + "\n")
        sys.stdout.flush()
