"""Process-wide configuration: the default executor, and what comes with it.

:func:`configure` installs the executor every decorated tool uses when none
is given to it or lent by a runtime (:func:`effectguard.use_executor`); it
can turn telemetry on and start a recovery sweep, and
:func:`trace_resolution` makes an operator's resolution (from the CLI or the
console) a span when the process traces. It sits above the integrations it
may start (telemetry, the operator's recovery), which the decorator below it
never imports.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

from effectguard._contract import seconds_problem
from effectguard._decorator import set_default_executor
from effectguard._executor._machine import (
    DEFAULT_DEADLINE,
    DEFAULT_RETRY_WAIT_INITIAL,
    DEFAULT_RETRY_WAIT_MAX,
    EffectExecutor,
)
from effectguard._executor._observe import Transition, observing
from effectguard._model import EffectEvent, EffectResult, OperationRecord
from effectguard.errors import ConfigurationError, InternalError
from effectguard.ledger import EffectLedger, open_ledger

__all__ = ["Configuration", "configure", "observe_effects", "trace_resolution"]

logger = logging.getLogger("effectguard.telemetry")

_lock = threading.Lock()
#: How long restoring a configuration waits for its start-up recovery sweep to stop.
_RECOVERY_JOIN_SECONDS = 30.0
_stack: list[Configuration] = []


@contextlib.contextmanager
def observe_effects(observer: Callable[[EffectResult[Any]], None]) -> Iterator[None]:
    """Report the result of every effect called in this context to ``observer``, once each.

    Whichever executor ran it (a tool's own ``executor=``, a lent one, the
    default), fresh or replayed, so that code around a tool learns of every
    effect it caused, even one the tool's own code caught and swallowed.
    Built on :func:`effectguard.observing`, which also reports each transition.
    """

    def results_only(transition: Transition) -> None:
        if transition.result is not None:
            observer(transition.result)

    with observing(results_only):
        yield


class Configuration:
    """A process default that :func:`configure` installed; undo it with :meth:`restore`.

    As a context manager it restores on exit, so a test or a script can use a
    ledger for a block and leave no trace. Configurations stack: restoring one
    makes the most recent one still in place the default again, in any order.
    """

    def __init__(
        self, executor: EffectExecutor, *, owns_ledger: bool, telemetry: Any = None
    ) -> None:
        self.executor = executor
        self._owns_ledger = owns_ledger
        #: The :class:`effectguard.otel.Instrumentation` of ``configure(telemetry=True)``, or None.
        self.telemetry = telemetry
        self.recovery: threading.Thread | None = None
        self._recoverer: Any = None

    def __repr__(self) -> str:
        return f"Configuration({self.executor!r})"

    def restore(self) -> None:
        """Withdraw this default, its telemetry, and close the ledger :func:`configure` opened.

        Restoring twice does nothing more.
        """
        with _lock:
            if self not in _stack:
                return
            _stack.remove(self)
            set_default_executor(_stack[-1].executor if _stack else None)
        if self.telemetry is not None:
            self.telemetry.uninstrument()
        if self.recovery is not None:
            # The sweep stops before its next operation; a probe under way finishes first.
            self._recoverer.stopped.set()
            self.recovery.join(_RECOVERY_JOIN_SECONDS)
        if self._owns_ledger:
            self.executor.ledger.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.restore()


def configure(
    ledger: str | os.PathLike[str] | EffectLedger | None = None,
    *,
    executor: EffectExecutor | None = None,
    clock: Callable[[], float] | None = None,
    wait_for_peer: float | None = None,
    retry_wait_initial: float | None = None,
    retry_wait_max: float | None = None,
    deadline: float | None = None,
    telemetry: bool = False,
    recover_on_start: bool = False,
    recover_tools: str | Sequence[object] | None = None,
) -> Configuration:
    """Set the executor every decorated tool uses when none is given or lent.

    ``ledger`` is a SQLite file path, a ``postgresql://`` URL or a ledger
    object; alternatively pass a ready ``executor``. ``clock`` (epoch seconds)
    and ``wait_for_peer`` (seconds a decorated tool waits for an identical
    call already dispatching, unless its ``@effect`` says; 30 when unset) go
    to the executor made for ``ledger``, and so do the defaults of
    ``retry_wait_initial`` (0.1 s), ``retry_wait_max`` (5 s) and ``deadline``
    (5 s) for contracts that leave them unset. A ledger that can never work (an
    unknown URL scheme, a missing directory) is refused here. The returned
    :class:`Configuration` restores the previous default when used as a
    context manager or when :meth:`Configuration.restore` is called.
    ``telemetry=True`` reports this executor's calls to OpenTelemetry's global
    providers (:func:`effectguard.otel.instrument`; needs the ``otel`` extra).

    With ``recover_on_start=True`` one recovery sweep (:func:`effectguard.recover`)
    runs in a background thread, so it never delays the first call: every
    uncertain operation nobody holds is re-probed, never dispatched. Its
    probes come from ``recover_tools`` (module names or tools), else from
    every tool decorated in this process by the time the thread starts.
    """
    waits = {
        "retry_wait_initial": retry_wait_initial,
        "retry_wait_max": retry_wait_max,
        "deadline": deadline,
    }
    executor, owns_ledger = _choose_executor(ledger, executor, clock, wait_for_peer, waits)
    instrumentation = _instrument(executor, owns_ledger=owns_ledger) if telemetry else None
    configuration = Configuration(executor, owns_ledger=owns_ledger, telemetry=instrumentation)
    with _lock:
        _stack.append(configuration)
        set_default_executor(executor)
    if recover_on_start:
        _start_recovery(configuration, recover_tools)
    return configuration


def _choose_executor(
    ledger: str | os.PathLike[str] | EffectLedger | None,
    executor: EffectExecutor | None,
    clock: Callable[[], float] | None,
    wait_for_peer: float | None,
    waits: dict[str, float | None],
) -> tuple[EffectExecutor, bool]:
    """The executor :func:`configure` installs, and whether it owns (must close) the ledger."""
    if (ledger is None) == (executor is None):
        msg = (
            "configure() takes either ledger= (a path, a postgresql:// URL or a ledger) "
            "or executor="
        )
        raise ConfigurationError(msg)
    if executor is not None:
        given = {"clock": clock, "wait_for_peer": wait_for_peer, **waits}
        _refuse_executor_options(executor, given)
        return executor, False
    if ledger is None:
        msg = "configure() got neither ledger= nor executor= past its check"
        raise InternalError(msg)
    return _executor_for(ledger, clock, wait_for_peer, waits)


def _instrument(executor: EffectExecutor, *, owns_ledger: bool) -> Any:
    """Turn telemetry on for ``executor``; without the ``otel`` extra, a clear error.

    The telemetry package is imported here only, so nothing imports
    OpenTelemetry unless telemetry was asked for.
    """
    try:
        from effectguard.otel import instrument  # noqa: PLC0415 - only when asked for
    except ImportError as exc:
        if owns_ledger:
            executor.ledger.close()
        msg = f"configure(telemetry=True): {exc}"
        raise ConfigurationError(msg) from exc
    try:
        return instrument(executor)
    except ConfigurationError:
        if owns_ledger:
            executor.ledger.close()
        raise


def trace_resolution(record: OperationRecord, event: EffectEvent) -> None:
    """Emit the span of an operator's resolution ``event`` of ``record``, if the process traces.

    Nothing here imports OpenTelemetry: only when it is already loaded (by
    ``opentelemetry-instrument``, or by an application running the CLI or the
    console in-process) and a tracer provider is installed does the resolution
    become a span (:mod:`effectguard.otel.operator`). Telemetry never changes a
    resolution's outcome: a failure to emit is logged, and the resolution stands.
    """
    if "opentelemetry.trace" not in sys.modules:
        return
    try:
        from effectguard.otel import operator  # noqa: PLC0415 - only when OpenTelemetry is loaded

        if operator.configured():
            operator.record_operator_action(event, record.contract)
    except Exception:  # telemetry must not turn a recorded resolution into a failure
        logger.warning(
            "could not emit the span of %s on %s", event.type, record.operation_id, exc_info=True
        )


def _start_recovery(configuration: Configuration, tools: str | Sequence[object] | None) -> None:
    """Run the start-up recovery sweep of ``configuration``'s ledger in the background."""
    from effectguard.operator._recover import start_recovery  # noqa: PLC0415 - loaded only when asked for

    configuration.recovery, configuration._recoverer = start_recovery(  # noqa: SLF001 - set once, here
        configuration.executor.ledger, tools
    )


def _refuse_executor_options(executor: EffectExecutor, given: Mapping[str, object]) -> None:
    """Refuse a ready ``executor`` that is not one, or options meant for one made here."""
    if not isinstance(executor, EffectExecutor):
        msg = f"executor must be an EffectExecutor, not {type(executor).__name__}"
        raise TypeError(msg)
    named = [name for name, value in given.items() if value is not None]
    if named:
        msg = (
            f"configure({'=..., '.join(named)}=...) applies to the executor made for "
            "ledger=; give it to yours"
        )
        raise ConfigurationError(msg)


def _executor_for(
    ledger: str | os.PathLike[str] | EffectLedger,
    clock: Callable[[], float] | None,
    wait_for_peer: float | None,
    waits: Mapping[str, float | None],
) -> tuple[EffectExecutor, bool]:
    """Open ``ledger`` and make its executor; also whether :func:`configure` owns the ledger.

    Raises :class:`ConfigurationError` for a bad wait before the ledger is opened
    (which may create its file), and closes a ledger it opened if the executor refuses.
    """
    problems = [
        problem
        for name, value in {"wait_for_peer": wait_for_peer, **waits}.items()
        if (problem := seconds_problem(name, value, zero_ok=True, optional=True)) is not None
    ]
    if problems:
        msg = "configure(): " + "; ".join(problems)
        raise ConfigurationError(msg)
    owns_ledger = not isinstance(ledger, EffectLedger)
    opened = open_ledger(ledger)
    try:
        executor = EffectExecutor(
            opened,
            clock=clock,
            wait_for_peer=wait_for_peer,
            retry_wait_initial=_or(waits["retry_wait_initial"], DEFAULT_RETRY_WAIT_INITIAL),
            retry_wait_max=_or(waits["retry_wait_max"], DEFAULT_RETRY_WAIT_MAX),
            deadline=_or(waits["deadline"], DEFAULT_DEADLINE),
        )
    except ValueError as exc:
        if owns_ledger:
            opened.close()
        msg = f"configure(): {exc}"
        raise ConfigurationError(msg) from exc
    return executor, owns_ledger


def _or(value: float | None, default: float) -> float:
    return default if value is None else value
