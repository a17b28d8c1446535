"""The executor: records an operation before dispatch, then settles and reconciles its outcome.

:mod:`~effectguard.executor.driver` holds :class:`EffectExecutor`, the sync and
async drivers; :mod:`~effectguard.executor.machine` the state machine they
both run (the rules, written once); :mod:`~effectguard.executor.reconcile` the
reconcile table; :mod:`~effectguard.executor.handler` how handlers and probes
are called under deadlines; :mod:`~effectguard.executor.late` what a late
handler's return becomes; :mod:`~effectguard.executor.outputs` what makes an
output storable; :mod:`~effectguard.executor.lease` leases and their renewal (their owners'
identities are :mod:`effectguard.process`, in the core, because the ledger's
operator resolution needs them too); :mod:`~effectguard.executor.observe` the
observer hook every transition is reported to, and
:mod:`~effectguard.executor.logs` the log lines written on it.
"""

from effectguard.executor.driver import EffectExecutor, Handler
from effectguard.executor.observe import CallStart, CallWatcher, Observer, Transition, observing

__all__ = [
    "CallStart",
    "CallWatcher",
    "EffectExecutor",
    "Handler",
    "Observer",
    "Transition",
    "observing",
]
