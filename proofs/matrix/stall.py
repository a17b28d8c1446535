"""An owner stuck inside the provider while others take its operation over.

Two ways a live owner loses its lease, played the same way:

- ``stall-past-lease``: the owner is stuck (a GC pause, a partition) until
  everyone's time passes its lease; a successor takes over with overlap risk.
- ``clock-jump``: time has not moved, but one caller's clock jumped forward
  past the lease (an NTP step): that caller takes the live lease over.

Then the stuck request commits: the owner's late writes must be fenced out
or recorded as evidence, never a second outcome. Threads and a hand-moved
clock make this deterministic, with no sleeping; with workers, they join the
successor's race to take over.
"""

from __future__ import annotations

import threading
import time

from effectguard import EffectExecutor
from effectguard.testkit._crash.child import ChildRun
from effectguard.testkit._crash.kinds import Setup
from effectguard.testkit.clock import OffsetClock
from effectguard.testkit.fakes.base import FakeProvider
from proofs.matrix.context import EpisodeContext, RoundTally

__all__ = ["stall"]

#: Upper bound on any wait for a thread; reaching it is a failure, not a result.
WAIT_SECONDS = 60.0


def stall(
    setup: Setup,
    context: EpisodeContext,
    *,
    jump: bool,
    run: ChildRun | None,
    tally: RoundTally,
) -> int:
    """The owner stalls inside the provider; a successor takes over. Returns the calls made.

    With ``jump`` the successor's clock is ahead by more than a lease and
    everyone else's time stands still; without, everyone's time moves past
    the lease. The successor runs in a thread too: a contract that resends
    (a broken one) may itself be held by the provider, and then both requests
    are released together.
    """
    provider = setup.provider
    errors: list[BaseException] = []
    ahead = setup.lease_seconds + 1

    def call(executor: EffectExecutor) -> None:
        try:
            executor.execute(setup.contract, setup.arguments, setup.handler)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the episode's own thread
            errors.append(exc)

    owner = threading.Thread(
        target=call, args=(context.executor,), name=f"stalled-owner-{setup.operation_id}"
    )
    owner.start()
    if not provider.wait_until_held(1, WAIT_SECONDS):
        msg = f"{setup.operation_id}: the stalled owner never reached the provider"
        raise RuntimeError(msg)
    if jump:
        successor_executor = EffectExecutor(
            context.counter, clock=OffsetClock(context.clock, ahead), jitter=context.jitter
        )
    else:
        context.clock.advance(ahead)
        successor_executor = context.executor
    successor = threading.Thread(
        target=call, args=(successor_executor,), name=f"successor-{setup.operation_id}"
    )
    if run is not None:
        context.workers.start(run)
    successor.start()
    try:
        _wait_for(successor, provider, setup.operation_id)
    finally:
        provider.release_late()
        for thread in (owner, successor):
            thread.join(WAIT_SECONDS)
        tally.add(context.workers.finish())
    for thread in (owner, successor):
        if thread.is_alive():
            msg = f"{setup.operation_id}: {thread.name} did not finish"
            raise RuntimeError(msg)
    if errors:
        raise errors[0]
    return 2


def _wait_for(successor: threading.Thread, provider: FakeProvider, operation_id: str) -> None:
    """Wait until the successor finished or is itself held inside the provider."""
    deadline = time.monotonic() + WAIT_SECONDS
    while successor.is_alive() and provider.held < 2:  # noqa: PLR2004 - owner and successor
        if time.monotonic() > deadline:
            msg = f"{operation_id}: the successor neither finished nor reached the provider"
            raise RuntimeError(msg)
        successor.join(0.001)
