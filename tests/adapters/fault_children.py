"""Child processes for the adapters' fault tests: run one, kill one with SIGKILL, race two.

Each child prints JSON lines on stdout (and ``ready`` when it waits to be
started); the parent reads them as they come, so it can act while a child is
still alive: kill it the moment it reports a pause, or start two together.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

OPS = str(Path(sys.executable).with_name("agent-effect-ops"))
AUDIT = ("--actor", "oncall", "--reason", "checked the provider", "--evidence-reference", "T-33")
TIMEOUT = 120


def spawn(script: Path, *args: str) -> subprocess.Popen[str]:
    """Start ``python script args...`` with its stdout piped, line-buffered."""
    return subprocess.Popen(
        [sys.executable, str(script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
    )


def next_line(child: subprocess.Popen[str]) -> str:
    """The child's next stdout line; its stderr in the failure when it ended first."""
    assert child.stdout is not None
    line = child.stdout.readline()
    if not line:
        child.wait(TIMEOUT)
        stderr = child.stderr.read() if child.stderr is not None else ""
        msg = f"child ended (exit {child.returncode}) before reporting: {stderr[-4000:]}"
        raise AssertionError(msg)
    return line.strip()


def report(script: Path, *args: str) -> dict[str, Any]:
    """Run the child to its end; its last stdout line, as JSON."""
    done = subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def kill_after_report(script: Path, *args: str) -> dict[str, Any]:
    """Run the child until it reports (a pause), then SIGKILL it while it is still alive."""
    child = spawn(script, *args)
    try:
        reported = dict(json.loads(next_line(child)))
        assert child.poll() is None, "the child was to wait, still alive, for its kill"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(TIMEOUT)
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()
    assert child.returncode == -signal.SIGKILL
    return reported


def race(workdir: Path, commands: Sequence[Sequence[str]]) -> list[dict[str, Any]]:
    """Start every child, wait until each is ready, release them together; their reports.

    Each child prints ``ready`` and then waits for ``workdir/go``.
    """
    go = workdir / "go"
    go.unlink(missing_ok=True)
    children = [spawn(Path(command[0]), *command[1:]) for command in commands]
    try:
        for child in children:
            assert next_line(child) == "ready"
        go.touch()
        reports = []
        for child in children:
            out, err = child.communicate(timeout=TIMEOUT)
            assert child.returncode == 0, err[-4000:]
            reports.append(dict(json.loads(out.strip().splitlines()[-1])))
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait(TIMEOUT)
        go.unlink(missing_ok=True)
    return reports


def ops(ledger: str, *command: str) -> subprocess.CompletedProcess[str]:
    """``agent-effect-ops --db LEDGER command...`` as an operator runs it; it must succeed."""
    done = subprocess.run(
        [OPS, "--db", ledger, *command],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done


def confirm(ledger: str, operation: str, output: dict[str, Any]) -> None:
    """``agent-effect-ops confirm`` with the output the operator found at the provider."""
    ops(
        ledger,
        "confirm",
        operation,
        "--output-json",
        json.dumps(output),
        "--provider-operation-id",
        str(output["id"]),
        *AUDIT,
    )


def authorize_retry(ledger: str, operation: str) -> None:
    """``agent-effect-ops authorize-retry``: the operator found the first attempt never landed."""
    ops(ledger, "authorize-retry", operation, *AUDIT)


def wait_for_go(workdir: Path) -> None:
    """Tell the parent this process is ready, then wait for its signal to start."""
    print("ready", flush=True)
    deadline = time.monotonic() + 60
    while not (workdir / "go").exists():
        if time.monotonic() > deadline:
            sys.exit("no go signal within 60 s")
        time.sleep(0.005)
