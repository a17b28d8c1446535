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

Episodes (one fault each, in turn):

- ``lost-ack``: the handler returns, then the acknowledgement is dropped
  (the executor sees a ``TimeoutError``) on the first attempt;
- ``fail-before``: the first attempt fails before the handler is called
  (``ConnectionRefusedError``);
- ``timeout``: the first attempt passes a short handler deadline, then the
  handler returns late.

An episode holds when the provider holds at most one effect for it and the
ledger never records as settled-without-effect (PREPARED, REJECTED) an effect
the counter shows committed. Every episode runs in this process: nothing is
killed and no proxy stands in front of a network provider.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import logging
import random
import tempfile
import threading
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from effectguard._contract import EffectContract
from effectguard._decorator import Tool
from effectguard._executor import EffectExecutor
from effectguard._executor._machine import seeded_jitter
from effectguard._model import EffectStatus, OutcomeProbeResult, ProbeStatus
from effectguard.errors import EffectGuardError
from effectguard.ledger.sqlite import SQLiteEffectLedger
from effectguard.testkit.clock import ManualClock

__all__ = [
    "EPISODE_KINDS",
    "CheckInputError",
    "CheckReport",
    "ClaimCheck",
    "Counter",
    "EpisodeReport",
    "Subject",
    "load_check",
    "run_check",
]

_log = logging.getLogger("effectguard")

#: ``counter(operation_id, idempotency_key)``: effects the user's provider committed.
Counter = Callable[[str, str | None], int]

#: The faults the episodes play, in turn.
EPISODE_KINDS = ("lost-ack", "fail-before", "timeout")

#: The deadline of the ``timeout`` episode's first attempt, in seconds.
_HANDLER_TIMEOUT = 0.2
#: How long an episode waits for a late handler or its recorded result.
_WAIT_SECONDS = 30.0
#: Probes asked in a row before PENDING counts as "pending forever".
_PROBES = 5
#: Outcomes that say "no effect happened": wrong when the counter shows one.
_SETTLED_WITHOUT_EFFECT = frozenset({EffectStatus.PREPARED, EffectStatus.REJECTED})
#: Outcomes that wait for a person.
_NEEDS_PERSON = frozenset({EffectStatus.QUARANTINED, EffectStatus.AWAITING_APPROVAL})


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

    @property
    def contract(self) -> EffectContract:
        """The tool's contract, as the decorator built it."""
        return self.tool.contract


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
        verdict = "HELD" if self.held else "BROKEN"
        line = (
            f"{verdict}: {held}/{len(self.episodes)} episodes held, {duplicates} duplicate(s), "
            f"{lost} lost confirmation(s), {len(broken)} broken claim(s)"
        )
        if broken:
            line += f" ({', '.join(broken)})"
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
                _yes(e.held),
            )
            for e in self.episodes
        ]
        widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
        lines = [
            "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in (header, *rows)
        ]
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
    spec: str, counter: str | None = None, *, same_request: Sequence[str] = ()
) -> Subject:
    """Resolve the tool and the counter; CheckInputError (one line) before anything is sent.

    The tool must be a plain, synchronous ``@effect`` function with a probe.
    The counter must be callable and answer a non-negative int for an
    operation that was never sent (it is asked once, for a made-up id).
    ``same_request`` names arguments that do not tell two business requests
    apart, so varying them may keep the operation id.
    """
    found = _resolve(spec, "tool")
    tool = getattr(found, "_self_tool", None)
    if not isinstance(tool, Tool):
        raise CheckInputError(f"tool {spec!r} is not an @effect tool")
    if tool.is_async or tool.shape.is_method_like:
        raise CheckInputError(
            f"tool {spec!r}: only synchronous module-level functions can be checked yet"
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
        candidate = _resolve(counter, "counter")
        if not callable(candidate):
            raise CheckInputError(f"counter {counter!r} is not callable")
        count = typing.cast("Counter", candidate)
        _preflight(count, counter)
    subject = Subject(spec, tool, count, counter, tuple(same_request))
    check_arguments(subject)
    return subject


def _preflight(counter: Counter, spec: str) -> None:
    try:
        answer = counter("effectguard-check-never-sent", "effectguard-check-never-sent")
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
        return f"{name}-{tag}-{rng.randrange(16**6):06x}"
    if parameter.default is not inspect.Parameter.empty:
        return parameter.default
    msg = f"cannot draw a value for parameter {name!r} ({hint!r}): annotate it str, int or float"
    raise CheckInputError(msg)


def check_arguments(subject: Subject) -> None:
    """Refuse, up front, a tool whose arguments cannot be drawn or identified by its contract."""
    arguments = _arguments(subject.tool, random.Random(0), "preflight")
    try:
        subject.contract.identity(arguments)
    except EffectGuardError as exc:  # a call_scoped template outside a scope, a bad template
        msg = f"tool {subject.spec!r}: its operation id cannot be made here: {exc}"
        raise CheckInputError(msg) from exc


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
        return int(self.subject.counter(operation_id, key))


class _Run:
    """One episode's world: a fresh ledger in a temporary directory, a hand-moved clock."""

    def __init__(self, directory: Path, seed: int) -> None:
        self.clock = ManualClock()
        self.ledger = SQLiteEffectLedger(directory / "ledger.db", clock=self.clock)
        self.executor = EffectExecutor(self.ledger, clock=self.clock, jitter=seeded_jitter(seed))

    def close(self) -> None:
        self.ledger.close()


def _handler(
    subject: Subject,
    counts: _Counts,
    fault: str,
    released: threading.Event,
    first_thread: list[threading.Thread],
) -> Callable[..., Any]:
    """The tool's handler with ``fault`` injected into its first attempt."""
    tool = subject.tool
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
        args, kwargs = tool.shape.tool_call(None, arguments, idempotency_key)
        output = tool.func(*args, **kwargs)
        counts.returned(operation_id)
        if first and fault == "lost-ack":
            raise _AckLost("effectguard check: acknowledgement dropped after the handler returned")
        if first and fault == "timeout":
            # Hold the return past the deadline: the executor must treat it as still in flight.
            released.wait(_WAIT_SECONDS)
        return output

    return handler


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
    handler = _handler(subject, counts, fault, released, first_thread)
    with tempfile.TemporaryDirectory(prefix="effectguard-check-") as directory:
        run = _Run(Path(directory), seed)
        try:
            try:
                run.executor.execute(contract, arguments, handler)
            finally:
                released.set()
            # A handler past its deadline records its late return from its own thread:
            # joining it means the ledger holds everything the episode did.
            for thread in first_thread:
                if thread is not threading.current_thread():
                    thread.join(_WAIT_SECONDS)
            # A second call must replay what the ledger holds, never send again.
            again = run.executor.execute(contract, arguments, handler)
            record = run.ledger.get(operation_id)
        finally:
            run.close()
    effects = counts.effects(operation_id, key)
    status = record.status if record is not None else again.status
    attempts = record.attempts if record is not None else again.attempts
    judge_duplicates = subject.counter is not None or not contract.provider_idempotency_guaranteed
    _log.debug("check episode %s %s: %s, %s effect(s)", number, fault, status.value, effects)
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
    )


def _call_tool(subject: Subject, arguments: Mapping[str, Any], key: str | None) -> Any:
    args, kwargs = subject.tool.shape.tool_call(None, arguments, key)
    return subject.tool.func(*args, **kwargs)


def _probe_claim(subject: Subject, counts: _Counts, seed: int) -> ClaimCheck:  # noqa: PLR0911 - one return per answer the probe can give
    """Send one request directly, then ask the probe about it."""
    contract = subject.contract
    arguments = _arguments(subject.tool, random.Random(f"{seed}:probe"), f"{seed}-probe")
    operation_id, key = contract.identity(arguments)
    try:
        _call_tool(subject, arguments, key)
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
    probe = contract.outcome_probe
    if probe is None:  # refused by load_check
        return ClaimCheck("probe", held=None, evidence="the tool has no probe")
    answers: list[ProbeStatus] = []
    for _ in range(_PROBES):
        try:
            result = probe(arguments, idempotency_key=key)
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
        _call_tool(subject, arguments, key)
        _call_tool(subject, arguments, key)
    except Exception as exc:  # noqa: BLE001 - the claim cannot be tested; the report says why
        evidence = f"the tool raised {type(exc).__name__}: {exc}"
        return ClaimCheck("idempotency_guaranteed", held=None, evidence=evidence)
    effects = counts.effects(operation_id, key)
    evidence = f"two sends with key {key!r} left {effects} effect(s)"
    return ClaimCheck("idempotency_guaranteed", held=effects <= 1, evidence=evidence)


def _template_claim(subject: Subject, seed: int) -> ClaimCheck:
    """Vary each argument in turn: two different requests must not share an operation id."""
    contract = subject.contract
    rng = random.Random(f"{seed}:template")
    base = _arguments(subject.tool, rng, f"{seed}-template")
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
    seed: int = 0,
    progress: Callable[[int], None] | None = None,
) -> CheckReport:
    """Play ``episodes`` episodes (the faults in turn) and check the contract's claims.

    Every episode has its own arguments drawn from ``seed`` and its own
    temporary ledger; the tool really runs, so each episode may make an effect
    at the user's provider. ``progress`` is called with 1 after each episode.
    """
    check_arguments(subject)
    counts = _Counts(subject)
    played = []
    for number in range(1, episodes + 1):
        played.append(
            _episode(
                subject, counts, number, EPISODE_KINDS[(number - 1) % len(EPISODE_KINDS)], seed
            )
        )
        if progress is not None:
            progress(1)
    claims = (
        _probe_claim(subject, counts, seed),
        _idempotency_claim(subject, counts, seed),
        _template_claim(subject, seed),
    )
    return CheckReport(
        tool=subject.spec,
        counter=subject.counter_spec,
        counted_by=counts.by,
        seed=seed,
        episodes=tuple(played),
        claims=claims,
    )
