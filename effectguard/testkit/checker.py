"""Your own ``@effect`` tool under injected faults: a receipt of the effects it really made.

:func:`load_check` resolves ``MODULE:FUNCTION`` (the tool) and an optional
counter; :func:`run_check` plays seeded episodes against the tool, each on a
fresh temporary SQLite ledger, and tests the claims of its contract.

The counter is the user's function ``counter(operation_id, idempotency_key) ->
int``: how many effects their sandbox or test provider committed for that
operation (``idempotency_key`` is None when the contract has no key template).
Without a counter the checker counts the handler's returns instead: a handler
that returned is taken to have made one effect. That count cannot see an effect
whose handler raised after committing, and it counts a resend the provider
deduplicated as a second effect, so without a counter a duplicate is judged
only for a contract that does not claim idempotency, and the idempotency claim
is not checked.

Episodes in this process (one fault each, in turn):

- ``lost-ack``: the handler returns, then the acknowledgement is dropped
  (the executor sees a ``TimeoutError``) on the first attempt;
- ``fail-before``: the first attempt fails before the handler is called
  (``ConnectionRefusedError``);
- ``timeout``: the first attempt passes a short handler deadline, then the
  handler returns late;
- ``ledger-down-at-claim``: another connection holds the ledger's exclusive
  lock when the call claims: the call must fail with nothing sent; a later
  call sends once;
- ``ledger-down-at-outcome``: the handler returns, then the ledger cannot be
  written: the row stays DISPATCHED; once its lease has passed, a later call
  settles it through the probe.

Episodes in other processes (children run :mod:`effectguard.testkit._check_child`), each
once by default: ``kill-before-send`` and ``kill-after-send`` SIGKILL the
calling process after its claim and after the tool returned; ``race`` starts
two processes calling one operation at once. They need a provider that every
process sees (a sandbox, a server, a file): with a counter that cannot see the
effect a killed process made, the episode is reported and not judged.

An episode holds when the provider holds at most one effect for it and the
ledger never records as settled-without-effect (PREPARED, REJECTED) an effect
the counter shows committed. For an HTTP tool, ``proxy_url`` puts a TCP proxy
(:mod:`effectguard.testkit.http_proxy`) in front of the sandbox: the
``lost-ack`` episode then drops the response on the wire once the request
reached the server.

An async tool is called through ``execute_async``, on one event loop that its
coroutines, its probe and an async counter share for the whole check.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import inspect
import json
import logging
import os
import random
import shlex
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import types
import typing
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from effectguard._contract import EffectContract
from effectguard._decorator import Tool, _tool_of
from effectguard._executor import EffectExecutor
from effectguard._executor._machine import seeded_jitter
from effectguard._model import EffectResult, EffectStatus, OutcomeProbeResult, ProbeStatus
from effectguard._scope import call_scope
from effectguard.errors import EffectGuardError, LedgerUnavailableError
from effectguard.ledger.sqlite import SQLiteEffectLedger
from effectguard.testkit.clock import ManualClock
from effectguard.testkit.http_proxy import HttpProxy

__all__ = [
    "EPISODE_KINDS",
    "PROCESS_KINDS",
    "CheckInputError",
    "CheckReport",
    "ClaimCheck",
    "Counter",
    "EpisodeReport",
    "Subject",
    "load_check",
    "run_check",
    "subject_of",
]

_log = logging.getLogger("effectguard")

#: ``counter(operation_id, idempotency_key)``: effects the user's provider committed.
Counter = Callable[[str, str | None], int]

#: The faults the episodes in this process play, in turn.
EPISODE_KINDS = (
    "lost-ack",
    "fail-before",
    "timeout",
    "ledger-down-at-claim",
    "ledger-down-at-outcome",
)
#: The faults played in other processes, in turn (each once by default).
PROCESS_KINDS = ("kill-before-send", "kill-after-send", "race")
#: How long the ledger may stay busy before a ledger-down episode's call gives up, in seconds.
_IMPATIENT_SECONDS = 0.05

#: The deadline of the ``timeout`` episode's first attempt, in seconds.
_HANDLER_TIMEOUT = 0.2
#: How long an episode waits for a late handler or its recorded result.
_WAIT_SECONDS = 30.0
#: Probes asked in a row before PENDING counts as "pending forever".
_PROBES = 5
#: Outcomes that say "no effect happened": wrong when the counter shows one.
_SETTLED_WITHOUT_EFFECT = frozenset({EffectStatus.PREPARED, EffectStatus.REJECTED})
#: str parameters drawn as email addresses (and any name ending in ``_email``).
_ADDRESS_NAMES = frozenset({"to", "email", "recipient", "sender", "cc", "bcc"})
#: Outcomes that wait for a person.
_NEEDS_PERSON = frozenset({EffectStatus.QUARANTINED, EffectStatus.AWAITING_APPROVAL})
#: The run id of the call scope a check gives a tool whose operation id needs one.
SCOPE_RUN_ID = "effectguard-check"


_loop_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def _checker_loop() -> asyncio.AbstractEventLoop:
    """The event loop every coroutine of a checked async tool runs on, on a daemon thread.

    One loop for the whole check, as in an application: a client the tool keeps
    between calls (bound to the loop it first ran on) keeps working.
    """
    global _loop  # noqa: PLW0603 - one loop per process, started on first use
    with _loop_lock:
        if _loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(
                target=loop.run_forever, name="effectguard-check-loop", daemon=True
            ).start()
            _loop = loop
        return _loop


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def _on_loop(awaitable: Awaitable[Any]) -> Any:
    """Run ``awaitable`` on the checker's loop and return its result, from any other thread.

    The task is made in a copy of the caller's context (``call_soon_threadsafe``
    copies it), so the call scope set around an episode reaches the tool's
    coroutine, as it would in the framework's own loop.
    """
    return asyncio.run_coroutine_threadsafe(_awaited(awaitable), _checker_loop()).result()


def _resolved(answer: Any) -> Any:
    """``answer``, or its result when an async tool, probe or counter gave an awaitable."""
    return _on_loop(answer) if inspect.isawaitable(answer) else answer


class CheckInputError(ValueError):
    """The tool or the counter cannot be checked as given; nothing was sent."""


class _AckLost(TimeoutError):
    """The acknowledgement the checker dropped after the handler returned."""


@dataclass(frozen=True, slots=True)
class Subject:
    """A tool ready to check: its contract, how to call it, and how to count its effects."""

    spec: str
    tool: Tool
    counter: Counter | None
    counter_spec: str | None
    same_request: tuple[str, ...] = ()
    instance: object | None = None
    """The object a method tool is bound to (``MODULE:OBJECT.METHOD``), else None."""
    proxy: HttpProxy | None = None
    """The proxy in front of the sandbox (``sandbox_url_env``) that loses lost-ack answers."""
    sandbox_url_env: str | None = None
    scoped: bool = False
    """The operation id comes from the call scope: each episode runs in one of its own."""

    def scope(self, tag: str) -> contextlib.AbstractContextManager[object]:
        """The call scope of one tool call named ``tag``, when the operation id needs one.

        Every call of one episode shares it, as a framework's retries of one tool
        call share its call id.
        """
        if not self.scoped:
            return contextlib.nullcontext()
        return call_scope(run_id=SCOPE_RUN_ID, call_id=tag)

    @property
    def lost_ack_by(self) -> str:
        """How the ``lost-ack`` episodes lose the acknowledgement."""
        if self.proxy is not None:
            return f"the TCP proxy in front of ${self.sandbox_url_env} drops the server's answer"
        return "the checker fails the call after the handler returned"

    @property
    def contract(self) -> EffectContract:
        """The tool's contract, as the decorator built it (its probe bound to ``instance``)."""
        return self.tool.contract_for(self.instance)

    def call(self, arguments: Mapping[str, Any], key: str | None) -> Any:
        """Call the tool's own function once, outside any executor: one real request."""
        func: Callable[..., Any] = self.tool.func
        if self.instance is not None:
            func = types.MethodType(func, self.instance)
        args, kwargs = self.tool.shape.tool_call(self.instance, arguments, key)
        return _resolved(func(*args, **kwargs))

    def execute(
        self,
        executor: EffectExecutor,
        contract: EffectContract,
        arguments: Mapping[str, Any],
        handler: Callable[..., Any],
    ) -> EffectResult[Any]:
        """One guarded call: an async tool's through ``execute_async``, a sync tool's not.

        An async tool's executor, its probe and the tool's own coroutines (which
        ``handler`` reaches through :meth:`call`) share the checker's one event loop.
        ``handler`` is the checker's own plain function, which injects the fault, so
        the executor runs it in a worker thread: a handler past its deadline is left
        running, as a sync tool's is, where an async tool's own handler would be
        cancelled.
        """
        if self.tool.is_async:
            run: Coroutine[Any, Any, EffectResult[Any]] = executor.execute_async(
                contract, arguments, handler
            )
            result: EffectResult[Any] = _on_loop(run)
            return result
        return executor.execute(contract, arguments, handler)

    def probe(self, arguments: Mapping[str, Any], key: str | None) -> Any:
        """The contract's probe asked once about ``arguments``, awaited for an async probe."""
        probe = self.contract.outcome_probe
        if probe is None:
            return None
        return _resolved(probe(arguments, idempotency_key=key))


@dataclass(frozen=True, slots=True)
class EpisodeReport:
    """One episode: the fault, what the provider holds and what the ledger recorded."""

    episode: int
    fault: str
    operation_id: str
    idempotency_key: str | None
    effects: int
    status: str
    attempts: int
    needs_person: bool
    duplicate: bool
    lost_confirmation: bool
    judged: bool = True
    """False when the episode could not be judged (``note`` says why); it then holds."""
    note: str = ""

    @property
    def held(self) -> bool:
        """True when there is no duplicate and no lost confirmation."""
        return not self.duplicate and not self.lost_confirmation


@dataclass(frozen=True, slots=True)
class ClaimCheck:
    """One claim of the contract; ``held`` is None when it was not (or could not be) checked."""

    claim: str
    held: bool | None
    evidence: str

    @property
    def broken(self) -> bool:
        """True when the claim was checked and found false."""
        return self.held is False


@dataclass(frozen=True, slots=True)
class CheckReport:
    """The receipt of a check: every episode, every claim, and how effects were counted."""

    tool: str
    counter: str | None
    counted_by: str
    seed: int
    episodes: tuple[EpisodeReport, ...]
    claims: tuple[ClaimCheck, ...]
    command: str = ""
    """The ``agent-effect check`` command that plays these episodes again."""
    lost_ack_by: str = ""
    """How the ``lost-ack`` episodes lost the acknowledgement."""

    @property
    def held(self) -> bool:
        """True when every episode held and no claim is broken."""
        return all(e.held for e in self.episodes) and not any(c.broken for c in self.claims)

    def summary(self) -> str:
        """One line: episodes held, duplicates, lost confirmations, broken claims."""
        held = sum(e.held for e in self.episodes)
        duplicates = sum(e.duplicate for e in self.episodes)
        lost = sum(e.lost_confirmation for e in self.episodes)
        broken = [c.claim for c in self.claims if c.broken]
        unjudged = sum(not e.judged for e in self.episodes)
        verdict = "HELD" if self.held else "BROKEN"
        line = (
            f"{verdict}: {held}/{len(self.episodes)} episodes held, {duplicates} duplicate(s), "
            f"{lost} lost confirmation(s), {len(broken)} broken claim(s)"
        )
        if broken:
            line += f" ({', '.join(broken)})"
        if unjudged:
            line += f"; {unjudged} episode(s) not judged"
        return f"{line}; effects counted by {self.counted_by}"

    def table(self) -> list[str]:
        """The episodes and the claims as aligned lines for a terminal."""
        header = ("#", "fault", "effects", "status", "person", "duplicate", "lost", "held")
        rows = [
            (
                str(e.episode),
                e.fault,
                str(e.effects),
                e.status,
                _yes(e.needs_person),
                _yes(e.duplicate),
                _yes(e.lost_confirmation),
                _yes(e.held) if e.judged else "n/a",
            )
            for e in self.episodes
        ]
        widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
        lines = [
            "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in (header, *rows)
        ]
        lines.extend(f"episode {e.episode} {e.fault}: {e.note}" for e in self.episodes if e.note)
        for claim in self.claims:
            state = {True: "held", False: "BROKEN", None: "not checked"}[claim.held]
            lines.append(f"claim {claim.claim}: {state} - {claim.evidence}")
        return lines

    def to_json(self) -> dict[str, Any]:
        """The receipt as JSON-ready data."""
        return {
            "tool": self.tool,
            "counter": self.counter,
            "counted_by": self.counted_by,
            "seed": self.seed,
            "command": self.command,
            "lost_ack_by": self.lost_ack_by,
            "held": self.held,
            "summary": self.summary(),
            "episodes": [{**dataclasses.asdict(e), "held": e.held} for e in self.episodes],
            "claims": [dataclasses.asdict(c) for c in self.claims],
        }


def _yes(value: bool) -> str:
    return "yes" if value else "no"


def _resolve(spec: str, what: str) -> Any:
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise CheckInputError(f"{what} {spec!r} is not MODULE:FUNCTION")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        msg = f"{what} {spec!r}: cannot import {module_name}: {type(exc).__name__}: {exc}"
        raise CheckInputError(msg) from exc
    target: Any = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise CheckInputError(f"{what} {spec!r}: {module_name} has no {attribute}")
        target = getattr(target, part)
    return target


def load_check(
    spec: str,
    counter: str | None = None,
    *,
    same_request: Sequence[str] = (),
    sandbox_url_env: str | None = None,
) -> Subject:
    """Resolve the tool and the counter; CheckInputError (one line) before anything is sent.

    The tool must be a synchronous ``@effect`` function with a probe: a
    module-level function, or a method reached through the object it is bound
    to (``MODULE:OBJECT.METHOD``). The counter must be callable and answer a
    non-negative int for an operation that was never sent (it is asked once,
    for a made-up id). ``same_request`` names arguments that do not tell two
    business requests apart, so varying them may keep the operation id.

    ``sandbox_url_env`` names the environment variable the tool reads its
    sandbox's ``http://`` URL from: a :class:`HttpProxy` is started in front of
    that URL and the variable pointed at it (before the tool's module is
    imported when the variable is already set, else right after), so the
    ``lost-ack`` episodes drop the server's real answer on the wire. Child
    processes inherit the variable.
    """
    proxy = None
    if sandbox_url_env is not None and sandbox_url_env in os.environ:
        proxy = _proxy_for(sandbox_url_env)
    found = _resolve(spec, "tool")
    if sandbox_url_env is not None and proxy is None:
        proxy = _proxy_for(sandbox_url_env)
    candidate = None if counter is None else _resolve(counter, "counter")
    subject = subject_of(
        found, candidate, spec=spec, counter_spec=counter, same_request=same_request
    )
    return dataclasses.replace(subject, proxy=proxy, sandbox_url_env=sandbox_url_env)


def _proxy_for(variable: str) -> HttpProxy:
    url = os.environ.get(variable)
    if not url:
        msg = f"--sandbox-url-env {variable}: the variable is not set (to your sandbox's URL)"
        raise CheckInputError(msg)
    try:
        proxy, through = HttpProxy.to(url)
    except (ValueError, OSError) as exc:
        raise CheckInputError(f"--sandbox-url-env {variable}: {exc}") from exc
    os.environ[variable] = through
    _log.info("check: %s now goes through a proxy to %s", variable, url)
    return proxy


def subject_of(
    tool_object: object,
    counter: object | None = None,
    *,
    spec: str | None = None,
    counter_spec: str | None = None,
    same_request: Sequence[str] = (),
) -> Subject:
    """Like :func:`load_check`, from the tool and counter objects themselves.

    ``spec`` (``MODULE:FUNCTION``) is how the report names the tool and how a
    process episode imports it; by default it is made from the function's
    module and qualified name.
    """
    if spec is None:
        func = getattr(tool_object, "__wrapped__", tool_object)
        spec = f"{getattr(func, '__module__', '?')}:{getattr(func, '__qualname__', '?')}"
    try:
        tool, instance = _tool_of(tool_object, "agent-effect check")
    except TypeError:
        raise CheckInputError(f"tool {spec!r} is not an @effect tool") from None
    if tool.shape.is_method_like and instance is None:
        raise CheckInputError(
            f"tool {spec!r} is a method: name it through the object it is bound to, "
            "MODULE:OBJECT.METHOD"
        )
    if tool.contract.outcome_probe is None:
        raise CheckInputError(
            f"tool {spec!r} has no probe: an uncertain outcome could never be settled, "
            "so there is nothing to check; add probe= to @effect"
        )
    unknown = sorted(set(same_request) - set(_parameters(tool)))
    if unknown:
        raise CheckInputError(f"--same-request names no parameter of {spec}: {', '.join(unknown)}")
    count: Counter | None = None
    if counter is not None:
        if counter_spec is None:
            counter_spec = getattr(counter, "__qualname__", repr(counter))
        if not callable(counter):
            raise CheckInputError(f"counter {counter_spec!r} is not callable")
        count = typing.cast("Counter", counter)
        _preflight(count, counter_spec)
    subject = Subject(spec, tool, count, counter_spec, tuple(same_request), instance)
    return dataclasses.replace(subject, scoped=check_arguments(subject))


def _preflight(counter: Counter, spec: str) -> None:
    try:
        answer = _resolved(counter("effectguard-check-never-sent", "effectguard-check-never-sent"))
    except Exception as exc:
        msg = f"counter {spec!r} raised {type(exc).__name__}: {exc}"
        raise CheckInputError(msg) from exc
    if isinstance(answer, bool) or not isinstance(answer, int) or answer < 0:
        msg = f"counter {spec!r} must return a non-negative int, got {answer!r}"
        raise CheckInputError(msg)


def _parameters(tool: Tool) -> list[str]:
    return [name for name in tool.shape.argument_names() if name != "idempotency_key"]


def _arguments(tool: Tool, rng: random.Random, tag: str) -> dict[str, Any]:
    """Fresh arguments from the tool's annotations: str, int, float and bool are drawn."""
    hints = typing.get_type_hints(tool.func)
    signature = inspect.signature(tool.func)
    arguments: dict[str, Any] = {}
    for name in _parameters(tool):
        arguments[name] = _value(name, hints.get(name), signature.parameters[name], rng, tag)
    return arguments


def _value(name: str, hint: Any, parameter: inspect.Parameter, rng: random.Random, tag: str) -> Any:
    if hint is bool:
        return rng.choice([True, False])
    if hint is int:
        return rng.randint(100, 99_999)
    if hint is float:
        return round(rng.uniform(1, 1000), 2)
    if hint is str:
        drawn = f"{name}-{tag}-{rng.randrange(16**6):06x}"
        if name in _ADDRESS_NAMES or name.endswith("_email"):
            return f"{drawn}@example.test"  # an address a mail server takes
        return drawn
    if parameter.default is not inspect.Parameter.empty:
        return parameter.default
    msg = f"cannot draw a value for parameter {name!r} ({hint!r}): annotate it str, int or float"
    raise CheckInputError(msg)


def check_arguments(subject: Subject) -> bool:
    """Refuse, up front, a tool whose arguments cannot be drawn or identified by its contract.

    Returns True when the operation id needs a call scope (``call_scoped``, or an
    ``operation_id`` callable reading the scope): the episodes then give it one.
    """
    arguments = _arguments(subject.tool, random.Random(0), "preflight")
    try:
        subject.contract.identity(arguments)
    except Exception as exc:  # noqa: BLE001 - a call_scoped id outside a scope, or the user's own callable failing: tried in a scope next
        try:
            with call_scope(run_id=SCOPE_RUN_ID, call_id="preflight"):
                subject.contract.identity(arguments)
        except Exception as again:  # noqa: BLE001 - whatever the user's id raises is refused in one line
            msg = (
                f"tool {subject.spec!r}: its operation id cannot be made here: "
                f"{type(again).__name__}: {again}"
            )
            raise CheckInputError(msg) from exc
        return True
    return False


class _Counts:
    """Effects per operation: the user's counter, or the handler's returns without one."""

    def __init__(self, subject: Subject) -> None:
        self.subject = subject
        self.returns: dict[str, int] = {}

    @property
    def by(self) -> str:
        if self.subject.counter_spec is not None:
            return f"the counter {self.subject.counter_spec}"
        return "the handler's returns (no --counter)"

    def returned(self, operation_id: str) -> None:
        self.returns[operation_id] = self.returns.get(operation_id, 0) + 1

    def effects(self, operation_id: str, key: str | None) -> int:
        if self.subject.counter is None:
            return self.returns.get(operation_id, 0)
        try:
            answer = _resolved(self.subject.counter(operation_id, key))
        except Exception as exc:
            msg = (
                f"counter {self.subject.counter_spec!r} raised {type(exc).__name__}: {exc} "
                f"while counting operation {operation_id!r}; the check stopped there"
            )
            raise CheckInputError(msg) from exc
        if isinstance(answer, bool) or not isinstance(answer, int) or answer < 0:
            msg = (
                f"counter {self.subject.counter_spec!r} answered {answer!r} for operation "
                f"{operation_id!r}, not a non-negative int; the check stopped there"
            )
            raise CheckInputError(msg)
        return answer


class _Run:
    """One episode's world: a fresh ledger in a temporary directory, a hand-moved clock."""

    def __init__(self, directory: Path, seed: int, *, busy_timeout: float = 10.0) -> None:
        self.path = directory / "ledger.db"
        self.clock = ManualClock()
        self.ledger = SQLiteEffectLedger(
            self.path, clock=self.clock, busy_timeout=busy_timeout, synchronous="NORMAL"
        )
        self.executor = EffectExecutor(self.ledger, clock=self.clock, jitter=seeded_jitter(seed))
        self._locker: sqlite3.Connection | None = None

    def make_unavailable(self) -> None:
        """Another connection takes the ledger's exclusive lock: writes fail until released."""
        locker = sqlite3.connect(
            self.path, isolation_level=None, timeout=_WAIT_SECONDS, check_same_thread=False
        )
        locker.execute("BEGIN EXCLUSIVE")
        self._locker = locker

    def make_available(self) -> None:
        """Release the lock :meth:`make_unavailable` took, if any."""
        locker, self._locker = self._locker, None
        if locker is not None:
            locker.execute("ROLLBACK")
            locker.close()

    def close(self) -> None:
        self.make_available()
        self.ledger.close()


def _handler(
    subject: Subject,
    counts: _Counts,
    fault: str,
    run: _Run,
    released: threading.Event,
    first_thread: list[threading.Thread],
    dropped: list[bool],
) -> Callable[..., Any]:
    """The tool's handler with ``fault`` injected into its first attempt.

    With a proxy, ``lost-ack`` loses the server's answer on the wire (the tool
    then raises on its own); ``dropped`` records whether the proxy did drop one.
    """
    calls = 0

    def handler(arguments: Mapping[str, Any], *, idempotency_key: str | None) -> Any:
        nonlocal calls
        calls += 1
        first = calls == 1
        if first:
            first_thread.append(threading.current_thread())
        if first and fault == "fail-before":
            raise ConnectionRefusedError("effectguard check: failed before the handler was called")
        operation_id = subject.contract.identity(arguments)[0]
        proxy = subject.proxy if first and fault == "lost-ack" else None
        lost_before = 0
        if proxy is not None:
            lost_before = proxy.responses_lost
            proxy.lose_response_to(idempotency_key)
        try:
            output = subject.call(arguments, idempotency_key)
        finally:
            if proxy is not None:
                proxy.keep_responses()
                dropped.append(proxy.responses_lost > lost_before)
        counts.returned(operation_id)
        if first and fault == "lost-ack":
            raise _AckLost("effectguard check: acknowledgement dropped after the handler returned")
        if first and fault == "timeout":
            # Hold the return past the deadline: the executor must treat it as still in flight.
            released.wait(_WAIT_SECONDS)
        if first and fault == "ledger-down-at-outcome":
            run.make_unavailable()
        return output

    return handler


def _first_call(
    subject: Subject,
    run: _Run,
    contract: EffectContract,
    arguments: Mapping[str, Any],
    handler: Callable[..., Any],
    fault: str,
) -> str:
    """The faulted call; returns a note when it did not do what the fault requires."""
    if fault == "ledger-down-at-claim":
        run.make_unavailable()
    refused = False
    try:
        subject.execute(run.executor, contract, arguments, handler)
    except LedgerUnavailableError:
        refused = True
    except EffectGuardError as exc:
        return f"the faulted call raised {type(exc).__name__}: {exc}"
    finally:
        run.make_available()
    if fault.startswith("ledger-down") and not refused:
        return "the call was not refused although its ledger could not be written"
    if fault == "ledger-down-at-outcome":
        # Later: the lease of the row left DISPATCHED has passed by the time anyone calls again.
        run.clock.advance(contract.lease_seconds + 1)
    return ""


def _episode(
    subject: Subject, counts: _Counts, number: int, fault: str, seed: int
) -> EpisodeReport:
    rng = random.Random(f"{seed}:{number}")
    arguments = _arguments(subject.tool, rng, f"{seed}-{number}")
    contract = subject.contract
    if fault == "timeout":
        contract = dataclasses.replace(contract, handler_timeout=_HANDLER_TIMEOUT)
    operation_id, key = contract.identity(arguments)
    released = threading.Event()
    first_thread: list[threading.Thread] = []
    impatient = fault.startswith("ledger-down")
    with tempfile.TemporaryDirectory(prefix="effectguard-check-") as directory:
        run = _Run(Path(directory), seed, busy_timeout=_IMPATIENT_SECONDS if impatient else 10.0)
        dropped: list[bool] = []
        handler = _handler(subject, counts, fault, run, released, first_thread, dropped)
        try:
            try:
                note = _first_call(subject, run, contract, arguments, handler, fault)
            finally:
                released.set()
            # A handler past its deadline records its late return from its own thread:
            # joining it means the ledger holds everything the episode did.
            for thread in first_thread:
                if thread is not threading.current_thread():
                    thread.join(_WAIT_SECONDS)
            if dropped and not dropped[0]:
                note = (
                    f"the tool's request never went through the proxy (${subject.sandbox_url_env}):"
                    " the acknowledgement was dropped after the handler returned instead"
                )
            before = counts.effects(operation_id, key)
            if fault == "ledger-down-at-claim" and before:
                note = f"{before} effect(s) were made while the ledger could not record the claim"
            # A later call settles what the fault left open; one after it must replay.
            subject.execute(run.executor, contract, arguments, handler)
            again = subject.execute(run.executor, contract, arguments, handler)
            record = run.ledger.get(operation_id)
        finally:
            run.close()
    effects = counts.effects(operation_id, key)
    status = record.status if record is not None else again.status
    attempts = record.attempts if record is not None else again.attempts
    _log.debug("check episode %s %s: %s, %s effect(s)", number, fault, status.value, effects)
    return _judged(subject, number, fault, operation_id, key, effects, status, attempts, note)


def _judged(
    subject: Subject,
    number: int,
    fault: str,
    operation_id: str,
    key: str | None,
    effects: int,
    status: EffectStatus,
    attempts: int,
    note: str = "",
) -> EpisodeReport:
    """The report of one episode: a duplicate, a lost confirmation, judged by the count."""
    contract = subject.contract
    judge_duplicates = subject.counter is not None or not contract.provider_idempotency_guaranteed
    return EpisodeReport(
        episode=number,
        fault=fault,
        operation_id=operation_id,
        idempotency_key=key,
        effects=effects,
        status=status.value,
        attempts=attempts,
        needs_person=status in _NEEDS_PERSON,
        duplicate=judge_duplicates and effects > 1,
        lost_confirmation=effects >= 1 and status in _SETTLED_WITHOUT_EFFECT,
        note=note,
    )


def _probe_claim(subject: Subject, counts: _Counts, seed: int) -> ClaimCheck:  # noqa: PLR0911 - one return per answer the probe can give
    """Send one request directly, then ask the probe about it."""
    contract = subject.contract
    arguments = _arguments(subject.tool, random.Random(f"{seed}:probe"), f"{seed}-probe")
    operation_id, key = contract.identity(arguments)
    try:
        subject.call(arguments, key)
    except Exception as exc:  # noqa: BLE001 - the claim cannot be tested; the report says why
        return ClaimCheck(
            "probe", held=None, evidence=f"the tool raised {type(exc).__name__}: {exc}"
        )
    counts.returned(operation_id)
    effects = counts.effects(operation_id, key)
    if effects < 1:
        return ClaimCheck(
            "probe",
            held=None,
            evidence=f"the counter shows no effect for key {key!r} after a return",
        )
    if contract.outcome_probe is None:  # refused by load_check
        return ClaimCheck("probe", held=None, evidence="the tool has no probe")
    answers: list[ProbeStatus] = []
    for _ in range(_PROBES):
        try:
            result = subject.probe(arguments, key)
        except Exception as exc:  # noqa: BLE001 - a probe that raises is reported, not fatal
            return ClaimCheck(
                "probe", held=False, evidence=f"the probe raised {type(exc).__name__}: {exc}"
            )
        status = result.status if isinstance(result, OutcomeProbeResult) else None
        if status is None:
            return ClaimCheck(
                "probe", held=False, evidence=f"the probe returned {result!r}, not a probe result"
            )
        answers.append(status)
        if status is not ProbeStatus.PENDING:
            break
    last = answers[-1]
    where = f"key {key!r} (operation {operation_id!r}), which shows {effects} effect(s)"
    if last is ProbeStatus.NOT_COMMITTED:
        return ClaimCheck(
            "probe", held=False, evidence=f"the probe answered NOT_COMMITTED for {where}"
        )
    if last is ProbeStatus.PENDING:
        return ClaimCheck(
            "probe", held=False, evidence=f"the probe answered PENDING {_PROBES} times for {where}"
        )
    return ClaimCheck("probe", held=True, evidence=f"the probe answered {last.value} for {where}")


def _idempotency_claim(subject: Subject, counts: _Counts, seed: int) -> ClaimCheck:
    """Send one request twice with one key; a guaranteed-idempotent provider holds one effect."""
    contract = subject.contract
    if not contract.provider_idempotency_guaranteed:
        return ClaimCheck("idempotency_guaranteed", held=None, evidence="not claimed")
    if subject.counter is None:
        return ClaimCheck(
            "idempotency_guaranteed",
            held=None,
            evidence="needs --counter: a deduplicated resend also returns",
        )
    arguments = _arguments(subject.tool, random.Random(f"{seed}:resend"), f"{seed}-resend")
    operation_id, key = contract.identity(arguments)
    try:
        subject.call(arguments, key)
        subject.call(arguments, key)
    except Exception as exc:  # noqa: BLE001 - the claim cannot be tested; the report says why
        evidence = f"the tool raised {type(exc).__name__}: {exc}"
        return ClaimCheck("idempotency_guaranteed", held=None, evidence=evidence)
    effects = counts.effects(operation_id, key)
    evidence = f"two sends with key {key!r} left {effects} effect(s)"
    return ClaimCheck("idempotency_guaranteed", held=effects <= 1, evidence=evidence)


def _template_claim(subject: Subject, seed: int) -> ClaimCheck:
    """Vary each argument in turn: two different requests must not share an operation id.

    With a call scope, each request is a tool call of its own in one run, as an
    agent making two calls would send them.
    """
    contract = subject.contract
    rng = random.Random(f"{seed}:template")
    base = _arguments(subject.tool, rng, f"{seed}-template")
    with subject.scope(f"{seed}-template"):
        first = contract.identity(base)[0]
    varied = [name for name in base if name not in subject.same_request]
    for name in varied:
        other = dict(base)
        for _ in range(8):
            other[name] = _arguments(subject.tool, rng, f"{seed}-template-{name}")[name]
            if other[name] != base[name]:
                break
        if other[name] == base[name]:
            continue
        with subject.scope(f"{seed}-template-{name}"):
            second = contract.identity(other)[0]
        if second == first:
            evidence = (
                f"{name}={base[name]!r} and {name}={other[name]!r} both map to operation id "
                f"{first!r}; put {name} in the template, or pass --same-request {name}"
            )
            return ClaimCheck("operation_id", held=False, evidence=evidence)
    return ClaimCheck(
        "operation_id",
        held=True,
        evidence=f"each of {', '.join(varied) or 'no argument'} changes it",
    )


def run_check(
    subject: Subject,
    *,
    episodes: int = len(EPISODE_KINDS),
    processes: int = len(PROCESS_KINDS),
    seed: int = 0,
    progress: Callable[[int], None] | None = None,
) -> CheckReport:
    """Play ``episodes`` episodes in this process and ``processes`` in others; check the claims.

    The faults take turns (:data:`EPISODE_KINDS`, then :data:`PROCESS_KINDS`).
    Every episode has its own arguments drawn from ``seed`` and its own
    temporary ledger; the tool really runs, so each episode may make an effect
    at the user's provider. ``progress`` is called with 1 after each episode.
    """
    subject = dataclasses.replace(subject, scoped=check_arguments(subject))
    counts = _Counts(subject)
    played = []
    for number in range(1, episodes + 1):
        fault = EPISODE_KINDS[(number - 1) % len(EPISODE_KINDS)]
        with subject.scope(f"{seed}-{number}"):
            played.append(_episode(subject, counts, number, fault, seed))
        if progress is not None:
            progress(1)
    for index in range(processes):
        number = episodes + index + 1
        fault = PROCESS_KINDS[index % len(PROCESS_KINDS)]
        arguments = _arguments(subject.tool, random.Random(f"{seed}:{number}"), f"{seed}-{number}")
        with subject.scope(f"{seed}-{number}"):
            played.append(_process_episode(subject, counts, number, fault, seed, arguments))
        if progress is not None:
            progress(1)
    with subject.scope(f"{seed}-probe"):
        probe = _probe_claim(subject, counts, seed)
    with subject.scope(f"{seed}-resend"):
        resend = _idempotency_claim(subject, counts, seed)
    claims = (probe, resend, _template_claim(subject, seed))
    return CheckReport(
        tool=subject.spec,
        counter=subject.counter_spec,
        counted_by=counts.by,
        seed=seed,
        episodes=tuple(played),
        claims=claims,
        command=command_of(subject, episodes=episodes, processes=processes, seed=seed),
        lost_ack_by=subject.lost_ack_by,
    )


def command_of(subject: Subject, *, episodes: int, processes: int, seed: int) -> str:
    """The shell command that plays the same episodes against the same tool."""
    words = ["agent-effect", "check", subject.spec]
    if subject.counter_spec is not None:
        words += ["--counter", subject.counter_spec]
    words += ["--episodes", str(episodes), "--processes", str(processes), "--seed", str(seed)]
    for name in subject.same_request:
        words += ["--same-request", name]
    if subject.sandbox_url_env is not None:
        words += ["--sandbox-url-env", subject.sandbox_url_env]
    return shlex.join(words)


# -- episodes in other processes ----------------------------------------------------------

#: How long a child may take (start, import, execute) before it is killed, in seconds.
WAIT_CHILD_SECONDS = 60.0
#: How long a racing child holds its call before sending, so the other one arrives.
HOLD_SECONDS = 0.5
#: The exit status of a child that failed (its traceback is in its error file).


def _request(directory: Path, name: str, data: Mapping[str, Any]) -> Path:
    path = directory / f"{name}.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _start(request: Path) -> subprocess.Popen[bytes]:
    """A fresh interpreter that can import whatever this one can (the current directory too)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [p for p in (str(Path.cwd()), *sys.path) if p] + [env.get("PYTHONPATH", "")]
    ).rstrip(os.pathsep)
    env.setdefault("EFFECTGUARD_LOG_LEVEL", "ERROR")
    return subprocess.Popen(  # noqa: S603 - our own module, by this interpreter
        [sys.executable, "-m", "effectguard.testkit._check_child", str(request)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _wait(child: subprocess.Popen[bytes]) -> int:
    try:
        return child.wait(WAIT_CHILD_SECONDS)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        return -signal.SIGKILL


def _failure(directory: Path, name: str, code: int) -> str:
    error = directory / f"{name}.error"
    if error.exists():
        lines = [line for line in error.read_text(encoding="utf-8").splitlines() if line.strip()]
        return f"the child process failed: {lines[-1] if lines else 'no traceback'}"
    return f"the child process ended with exit code {code}"


def _returns(directory: Path) -> int:
    path = directory / "returns"
    return len(path.read_text(encoding="utf-8").splitlines()) if path.exists() else 0


def _process_episode(
    subject: Subject,
    counts: _Counts,
    number: int,
    fault: str,
    seed: int,
    arguments: Mapping[str, Any],
) -> EpisodeReport:
    """Play one process episode of ``fault``; the report counts effects at the provider."""
    contract = subject.contract
    operation_id, key = contract.identity(arguments)
    with tempfile.TemporaryDirectory(prefix="effectguard-check-") as workdir:
        directory = Path(workdir)
        clock = ManualClock()
        ledger = SQLiteEffectLedger(directory / "ledger.db", clock=clock, synchronous="NORMAL")
        try:
            base = {
                "scope": f"{seed}-{number}" if subject.scoped else None,
                "tool": subject.spec,
                "ledger": str(directory / "ledger.db"),
                "arguments": dict(arguments),
                "mode": fault,
                "now": clock(),
                "directory": str(directory),
            }
            names = ["racer-1", "racer-2"] if fault == "race" else ["child"]
            children = [
                (name, _start(_request(directory, name, {**base, "name": name}))) for name in names
            ]
            if fault == "race":
                _release(directory, names, children)
            codes = {name: _wait(child) for name, child in children}
            expected = -signal.SIGKILL if fault.startswith("kill") else 0
            wrong = {name: code for name, code in codes.items() if code != expected}
            if wrong:
                name, code = next(iter(wrong.items()))
                note = _failure(directory, name, code)
                return _unjudged(number, fault, operation_id, key, note)
            by_children = _returns(directory)
            seen = counts.effects(operation_id, key) if subject.counter is not None else None
            if seen is not None and seen < by_children:
                note = (
                    f"the counter saw {seen} effect(s) after the child's tool returned "
                    f"{by_children} time(s): the provider is not shared between processes "
                    "(in memory?); give the tool a sandbox, a server or a file every process "
                    "reaches"
                )
                return _unjudged(number, fault, operation_id, key, note)
            counts.returns[operation_id] = counts.returns.get(operation_id, 0) + by_children
            race_note = _overlap(directory, names) if fault == "race" else ""
            # Recovery, in this process: settle what the children left, never send twice.
            executor = EffectExecutor(ledger, clock=clock, jitter=seeded_jitter(seed))
            handler = _counting(subject, counts)
            for _ in range(2):
                try:
                    subject.execute(executor, contract, arguments, handler)
                except EffectGuardError as exc:
                    note = f"recovery in this process raised {type(exc).__name__}: {exc}"
                    return _unjudged(number, fault, operation_id, key, note)
                record = ledger.get(operation_id)
                if record is None or record.status is not EffectStatus.DISPATCHED:
                    break
                clock.advance(contract.lease_seconds + 1)  # the lease a live owner would hold
            record = ledger.get(operation_id)
        finally:
            ledger.close()
    effects = counts.effects(operation_id, key)
    status = record.status if record is not None else EffectStatus.PREPARED
    attempts = record.attempts if record is not None else 0
    return _judged(subject, number, fault, operation_id, key, effects, status, attempts, race_note)


def _overlap(directory: Path, names: list[str]) -> str:
    """A note when the racers did not overlap: neither arrived while the other held the call."""
    outcomes = []
    for name in names:
        path = directory / f"{name}.outcome"
        if path.exists():
            outcomes.append(json.loads(path.read_text(encoding="utf-8")))
    holders = [o for o in outcomes if "from" in o]
    others = [o for o in outcomes if "from" not in o]
    if len(holders) == 1 and others:
        holder = holders[0]
        until = holder.get("until", float("inf"))
        if all(other["started"] > until for other in others):
            return "the racers did not overlap: the second began after the first had sent"
    return ""


def _release(
    directory: Path, names: list[str], children: list[tuple[str, subprocess.Popen[bytes]]]
) -> None:
    """Wait until both racers are ready (or gone), then let them go at once."""
    deadline = time.monotonic() + WAIT_CHILD_SECONDS
    while time.monotonic() < deadline:
        ready = all((directory / f"{name}.ready").exists() for name in names)
        if ready or any(child.poll() is not None for _, child in children):
            break
        time.sleep(0.005)
    (directory / "start").touch()


def _unjudged(
    number: int, fault: str, operation_id: str, key: str | None, note: str
) -> EpisodeReport:
    return EpisodeReport(
        episode=number,
        fault=fault,
        operation_id=operation_id,
        idempotency_key=key,
        effects=0,
        status="-",
        attempts=0,
        needs_person=False,
        duplicate=False,
        lost_confirmation=False,
        judged=False,
        note=note,
    )


def _counting(subject: Subject, counts: _Counts) -> Callable[..., Any]:
    def handler(arguments: Mapping[str, Any], *, idempotency_key: str | None) -> Any:
        output = subject.call(arguments, idempotency_key)
        counts.returned(subject.contract.identity(arguments)[0])
        return output

    return handler
