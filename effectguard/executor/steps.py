"""What the state machine asks its drivers to do, and the call it works on.

:class:`~effectguard.executor.machine.StateMachine` is a generator of these
steps: it yields a :data:`Step` and receives the step's result, so the rules
are written once while each driver (sync or async, in
:mod:`~effectguard.executor.driver`) decides how a step is performed. A
:class:`Call` is everything the machine knows about the call it works on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any

from effectguard.contract import EffectContract
from effectguard.executor.observe import Observer
from effectguard.executor.pacing import Pace
from effectguard.model import EffectResult

__all__ = [
    "Call",
    "HandlerStep",
    "LedgerStep",
    "Machine",
    "PauseStep",
    "ProbeStep",
    "Step",
]


@dataclass(frozen=True, slots=True)
class Call:
    """One call of an effect: its contract, arguments, handler and identity.

    ``secrets`` are the redacted argument values, masked in any text user code
    produced before it is stored or observed; ``observers`` hear of every
    transition and of the result.
    """

    contract: EffectContract
    arguments: Mapping[str, Any]
    handler: Callable[..., Any]
    operation_id: str
    provider_key: str | None
    fingerprint: str
    #: How long to wait for a peer holding a live lease (``wait_for_peer``), in seconds.
    wait_seconds: float
    pace: Pace
    secrets: tuple[str, ...] = ()
    observers: tuple[Observer, ...] = ()
    #: Driven from an event loop (``execute_async``): its steps may be awaited there.
    on_loop: bool = False


@dataclass(frozen=True, slots=True)
class LedgerStep:
    """Run ``run`` (a ledger call) and send back its result.

    ``run_async``, when set, is the same call for a driver on an event loop:
    awaited there instead of running ``run`` in a worker thread.
    """

    run: Callable[[], Any]
    run_async: Callable[[], Awaitable[Any]] | None = None


@dataclass(frozen=True, slots=True)
class HandlerStep:
    """Call the handler for ``attempt`` under lease ``token``; send back a HandlerOutcome."""

    token: str
    attempt: int


@dataclass(frozen=True, slots=True)
class ProbeStep:
    """Call the contract's probe; send back an OutcomeProbeResult."""


@dataclass(frozen=True, slots=True)
class PauseStep:
    """Wait ``seconds`` before the next step.

    A ``backoff`` wait (between attempts or probes) advances an injected
    manual clock instead of sleeping; a poll for another worker always sleeps,
    since that worker needs real time to progress.
    """

    seconds: float
    backoff: bool = False


#: One piece of I/O the machine needs performed.
Step = LedgerStep | HandlerStep | ProbeStep | PauseStep
#: A run of the machine: yields steps, returns the result its caller receives.
Machine = Generator[Step, Any, EffectResult[Any]]
