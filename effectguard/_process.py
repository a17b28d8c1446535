"""Which process holds a lease, and whether that process is provably gone.

"Provably" is the point: a lease owner on another host, or in a process table
this process cannot see, is never presumed dead; only its lease expiry or its
own record clears it.

A core module (it uses only the model) because two parts need the same
answer: the executor, which takes over a lease whose owner is gone, and the
ledger's operator resolution, which must not make an operator wait for the
expiry of a lease the executor would already take over.
"""

from __future__ import annotations

import os
import socket
from functools import cache
from pathlib import Path

from effectguard._model import LeaseOwner

__all__ = ["current_owner", "is_this_process", "process_gone"]


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="ascii").strip()
    except OSError:
        return ""


def _stat_fields(pid: int) -> list[str] | None:
    """Return the fields of ``/proc/<pid>/stat`` after the command name, or None if absent.

    Only a missing entry means absent. Any other failure to read it (no file
    descriptors left, ``hidepid``) raises ``OSError``: it proves nothing.
    """
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name is in parentheses and may itself contain ") ", so split at the last one.
    return text.rpartition(")")[2].split()


def _start_time(pid: int) -> str:
    try:
        fields = _stat_fields(pid)
    except OSError:
        return ""
    # Field 22 of stat (index 19 after the name): start time in clock ticks since boot.
    return fields[19] if fields is not None and len(fields) > 19 else ""  # noqa: PLR2004 - field 22 of /proc/<pid>/stat, as the comment above says


@cache
def _owner_for(pid: int) -> LeaseOwner:
    try:
        namespace = str(Path("/proc/self/ns/pid").readlink())
    except OSError:
        namespace = ""
    return LeaseOwner(
        host=socket.gethostname(),
        boot_id=_read("/proc/sys/kernel/random/boot_id"),
        pid_namespace=namespace,
        pid=pid,
        start_time=_start_time(pid),
    )


def current_owner() -> LeaseOwner:
    """Return this process's identity (recomputed after ``fork()``)."""
    return _owner_for(os.getpid())


def _same_process_table(owner: LeaseOwner, me: LeaseOwner) -> bool:
    return (
        owner.host == me.host
        and owner.boot_id == me.boot_id
        and owner.pid_namespace == me.pid_namespace
    )


def is_this_process(owner: LeaseOwner) -> bool:
    """True when ``owner`` is exactly this process (same host, boot, namespace, pid and start)."""
    me = current_owner()
    return (
        _same_process_table(owner, me) and owner.pid == me.pid and owner.start_time == me.start_time
    )


def process_gone(owner: LeaseOwner) -> bool:
    """True only when ``owner`` is provably not running any more.

    It must live in this process's own process table (same host, boot and pid
    namespace) and its pid must be absent, a zombie, or a different process
    (another start time). Anything this process cannot see counts as alive.
    """
    me = current_owner()
    if not _same_process_table(owner, me):
        return False
    if owner.pid == me.pid and owner.start_time == me.start_time:
        return False
    try:
        fields = _stat_fields(owner.pid)
    except OSError:
        return False  # unreadable is not absent: presume it alive
    if fields is None:
        if Path("/proc/self").is_dir():
            return True
        # No procfs (not Linux): only a pid that does not exist at all is provably gone.
        try:
            os.kill(owner.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False
    state = fields[0] if fields else ""
    if state in ("Z", "X"):
        return True  # a zombie has exited; it can send nothing more
    start = fields[19] if len(fields) > 19 else ""  # noqa: PLR2004 - field 22 of /proc/<pid>/stat, as the comment above says
    return bool(owner.start_time) and start != owner.start_time
