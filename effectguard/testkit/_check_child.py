"""A child process of the checker's process episodes (``-m effectguard.testkit._check_child``).

It reads the request file named on its command line, imports the user's tool
by its ``MODULE:FUNCTION``, opens the episode's SQLite ledger file and
executes the tool once:

- ``kill-before-send``: claims the operation, then SIGKILLs itself before the
  tool is called;
- ``kill-after-send``: calls the tool, writes down that it returned, then
  SIGKILLs itself before the outcome is recorded;
- ``race``: waits for the start file with the other racer, then executes
  (holding its call a moment, so the other arrives).

Any other failure leaves its traceback in ``NAME.error`` and exit status 3.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from effectguard._executor import EffectExecutor
from effectguard._executor._machine import seeded_jitter
from effectguard._scope import call_scope
from effectguard.errors import EffectGuardError
from effectguard.ledger.sqlite import SQLiteEffectLedger
from effectguard.testkit.checker import (
    HOLD_SECONDS,
    SCOPE_RUN_ID,
    WAIT_CHILD_SECONDS,
    load_check,
)
from effectguard.testkit.clock import ManualClock

__all__ = ["main"]

#: The exit status of a child that failed (its traceback is in its error file).
_FAILED = 3


def _note_return(directory: Path) -> None:
    with (directory / "returns").open("a", encoding="utf-8") as stream:
        stream.write("returned\n")
        stream.flush()
        os.fsync(stream.fileno())


def _child(request: Mapping[str, Any]) -> None:
    directory = Path(request["directory"])
    mode = str(request["mode"])
    subject = load_check(str(request["tool"]))
    contract = subject.contract
    arguments = dict(request["arguments"])
    clock = ManualClock(float(request["now"]))
    ledger = SQLiteEffectLedger(request["ledger"], clock=clock, synchronous="NORMAL")
    executor = EffectExecutor(ledger, clock=clock, jitter=seeded_jitter(str(request["name"])))

    held: dict[str, float] = {}

    def handler(call: Mapping[str, Any], *, idempotency_key: str | None) -> Any:
        held.setdefault("from", time.time())
        if mode == "kill-before-send":
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "race":
            time.sleep(HOLD_SECONDS)  # hold the operation while the other racer arrives
        output = subject.call(call, idempotency_key)
        held["until"] = time.time()
        _note_return(directory)
        if mode == "kill-after-send":
            os.kill(os.getpid(), signal.SIGKILL)
        return output

    if mode == "race":
        (directory / f"{request['name']}.ready").touch()
        deadline = time.monotonic() + WAIT_CHILD_SECONDS
        while not (directory / "start").exists() and time.monotonic() < deadline:
            time.sleep(0.001)
    started = time.time()
    scope = request.get("scope")
    try:
        with (
            contextlib.nullcontext()
            if scope is None
            else call_scope(run_id=SCOPE_RUN_ID, call_id=str(scope))
        ):
            result = subject.execute(executor, contract, arguments, handler)
        outcome: dict[str, Any] = {"status": result.status.value, "replayed": result.replayed}
    except EffectGuardError as exc:  # the other racer holds the operation: what it does counts
        outcome = {"status": type(exc).__name__, "replayed": False}
    outcome = {**outcome, "started": started, **held}
    (directory / f"{request['name']}.outcome").write_text(json.dumps(outcome), encoding="utf-8")


def main(argv: list[str]) -> None:
    """The child: read the request file named in ``argv``, execute once; exit 3 on a failure."""
    level = os.environ.get("EFFECTGUARD_LOG_LEVEL", "ERROR").upper()
    if level in logging.getLevelNamesMapping():
        logging.getLogger("effectguard").setLevel(level)
    request_path = Path(argv[0])
    request = json.loads(request_path.read_text(encoding="utf-8"))
    try:
        _child(request)
    except BaseException:  # noqa: BLE001 - reported to the parent through the error file
        error = Path(request["directory"]) / f"{request['name']}.error"
        error.write_text(traceback.format_exc(), encoding="utf-8")
        sys.stdout.flush()
        os._exit(_FAILED)
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
