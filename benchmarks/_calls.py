"""The cost of one call: guarded vs by hand, replay vs a read, decorated vs direct.

Every measurement interleaves its subject and its baseline in chunks of 50
calls (which goes first rotates), so a slow moment of the disk or of a
neighbour lands on both; each round calls ``ops`` distinct operations of each
and reports microseconds per call.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any

from benchmarks._config import BenchError
from benchmarks._counting import CountingLedger
from benchmarks._site import RawStore
from benchmarks._stats import Comparison, per_call_us
from effectguard import (
    EffectContract,
    EffectExecutor,
    EffectLedger,
    EffectResult,
    EffectStatus,
    EventType,
    effect,
)
from effectguard._fingerprint import canonical_json
from effectguard._process import current_owner
from effectguard.ledger._protocol import Changes, EventDraft, Expect, Lease, NewOperation

__all__ = [
    "CONTRACT",
    "GUARDED_TARGETS",
    "REPLAY_TARGET",
    "CallBench",
    "arguments",
    "count_calls",
    "handler",
    "interleave",
    "interleave_named",
    "primitives",
]

#: Issue 15: a guarded call over the same durable writes done by hand, at most, per backend.
GUARDED_TARGETS = {"sqlite": 1.10, "postgres": 1.5}
#: Issue 15: a replay over a raw indexed read of the same row (output decoded), at most.
REPLAY_TARGET = 2.0

_WARMUP = 20
# Calls of one measure timed in a row before the next measure takes its turn.
_CHUNK = 50


def _operation_id(arguments: Mapping[str, Any]) -> str:
    return f"bench:{arguments['run']}:{arguments['n']}"


#: The guarded calls' contract: no probe, no key, nothing to reconcile.
CONTRACT = EffectContract(name="bench.noop", operation_id=_operation_id)


def arguments(run: str, n: int) -> dict[str, Any]:
    """The arguments of call ``n`` of batch ``run``: small, like a typical tool call's."""
    return {"amount_cents": 1999, "currency": "EUR", "n": n, "run": run}


def handler(arguments: Mapping[str, Any], *, idempotency_key: str | None) -> dict[str, Any]:
    """The tool: does nothing and returns a small dict."""
    del idempotency_key
    return {"n": arguments["n"], "ok": True}


def _check(result: EffectResult[Any], *, replayed: bool) -> None:
    if result.status is not EffectStatus.CONFIRMED or result.replayed is not replayed:
        msg = (
            f"operation {result.operation_id} ended {result.status.value} "
            f"(replayed={result.replayed}): the bench's calls must confirm"
        )
        raise BenchError(msg)


def interleave(
    rounds: int, ops: int, *makers: Callable[[int], Callable[[int], None]]
) -> tuple[tuple[float, ...], ...]:
    """Microseconds per call of each measure, per round, the measures interleaved in chunks.

    Each maker, given the round's index, returns that measure's call. Every
    round runs ``ops`` calls of each measure in chunks of :data:`_CHUNK`,
    rotating their order chunk by chunk, so a slow moment of the disk or of a
    neighbour on a shared machine lands on every measure alike.
    """
    results: list[list[float]] = [[] for _ in makers]
    for index in range(rounds):
        calls = [make(index) for make in makers]
        spent = [0.0] * len(makers)
        for turn, start in enumerate(range(0, ops, _CHUNK)):
            numbers = range(start, min(start + _CHUNK, ops))
            for offset in range(len(calls)):
                which = (turn + offset) % len(calls)
                call = calls[which]
                started = time.perf_counter()
                for n in numbers:
                    call(n)
                spent[which] += time.perf_counter() - started
        for which, seconds in enumerate(spent):
            results[which].append(seconds * 1_000_000 / ops)
    return tuple(tuple(values) for values in results)


def interleave_named(
    measures: Mapping[str, Callable[[], None]], rounds: int, calls: int
) -> dict[str, list[float]]:
    """:func:`interleave` for measures that take no argument: their per-round results by name."""
    makers = [lambda _round, call=call: lambda _n: call() for call in measures.values()]
    timed = interleave(rounds, calls, *makers)
    return {name: list(values) for name, values in zip(measures, timed, strict=True)}


def primitives(ledger: EffectLedger, run: str) -> Callable[[int], None]:
    """The ledger's two writes for call ``n`` of batch ``run``, called directly: no executor."""
    owner = current_owner()
    confirmed = (
        EventDraft(EventType.CONFIRMED, EffectStatus.DISPATCHED, EffectStatus.CONFIRMED, 1),
    )

    def call(n: int) -> None:
        given = arguments(run, n)
        operation_id = f"primitives:{_operation_id(given)}"
        token = secrets.token_hex(16)
        operation = NewOperation(
            operation_id,
            "bench.primitives",
            1,
            "0" * 64,
            None,
            given,
            3,
            Lease(token, owner, 30.0),
        )
        ledger.claim(operation)
        output = handler(given, idempotency_key=None)
        changes = Changes(
            EffectStatus.CONFIRMED,
            lease=None,
            output_json=canonical_json(output),
            provider_operation_id=None,
            reason=None,
        )
        ledger.transition(operation_id, Expect(lease_token=token), changes, confirmed)

    return call


class CallBench:
    """The per-call measurements on one executor and one raw store."""

    def __init__(
        self, executor: EffectExecutor, raw: RawStore, ops: int, rounds: int, backend: str
    ) -> None:
        self.executor = executor
        self.backend = backend
        self.raw = raw
        self.ops = ops
        self.rounds = rounds
        #: Operations this bench has created in the executor's ledger so far.
        self.created = 0

    # -- the work of one call ----------------------------------------------------------

    def _guarded(self, run: str) -> Callable[[int], None]:
        execute = self.executor.execute

        def call(n: int) -> None:
            _check(execute(CONTRACT, arguments(run, n), handler), replayed=False)

        return call

    def _replay(self, run: str) -> Callable[[int], None]:
        execute = self.executor.execute

        def call(n: int) -> None:
            _check(execute(CONTRACT, arguments(run, n), handler), replayed=True)

        return call

    def _by_hand(self, run: str) -> Callable[[int], None]:
        record = self.raw.record

        def call(n: int) -> None:
            given = arguments(run, n)
            output = handler(given, idempotency_key=None)
            record(_operation_id(given), json.dumps(given), json.dumps(output))

        return call

    def _read(self, run: str) -> Callable[[int], None]:
        read = self.raw.read

        def call(n: int) -> None:
            read(_operation_id(arguments(run, n)))

        return call

    # -- the measurements --------------------------------------------------------------

    def warm_up(self) -> None:
        """Open connections and fill caches before anything is timed."""
        per_call_us(_WARMUP, self._guarded("warm"))
        per_call_us(_WARMUP, self._by_hand("warm"))
        per_call_us(_WARMUP, primitives(self.executor.ledger, "warm"))
        self.created += 2 * _WARMUP

    def guarded(self) -> tuple[Comparison, tuple[float, ...]]:
        """A guarded call (two commits) against the same two commits written by hand.

        Also returns, per round, the ledger's own two writes called directly,
        which splits the difference into the ledger's storage and the executor.
        """
        subject, baseline, direct = interleave(
            self.rounds,
            self.ops,
            lambda r: self._guarded(f"g{r}"),
            lambda r: self._by_hand(f"g{r}"),
            lambda r: primitives(self.executor.ledger, f"g{r}"),
        )
        self.created += 2 * self.rounds * self.ops
        comparison = Comparison(
            subject="EffectExecutor.execute, a handler that does nothing (fresh operation)",
            baseline="insert + commit, update + commit, by hand, same durability",
            subject_rounds=subject,
            baseline_rounds=baseline,
            target=GUARDED_TARGETS[self.backend],
        )
        return comparison, direct

    def replay(self) -> Comparison:
        """Replaying a confirmed operation against reading its row by primary key.

        Replays the operations of :meth:`guarded`'s first round, which must have run.
        """
        subject, baseline = interleave(
            self.rounds,
            self.ops,
            lambda _: self._replay("g0"),
            lambda _: self._read("g0"),
        )
        return Comparison(
            subject="EffectExecutor.execute of a CONFIRMED operation (replayed)",
            baseline="SELECT of the row by primary key, output decoded, by hand",
            subject_rounds=subject,
            baseline_rounds=baseline,
            target=REPLAY_TARGET,
        )

    def decorator(self) -> tuple[Comparison, Comparison]:
        """A decorated call against the same call through ``execute``: fresh, then replayed."""

        @effect(operation_id="bench:{run}:{n}", executor=self.executor, name="bench.decorated")
        def noop(amount_cents: int, currency: str, n: int, run: str) -> dict[str, Any]:
            del amount_cents, currency, run
            return {"n": n, "ok": True}

        def decorated(run: str) -> Callable[[int], None]:
            def call(n: int) -> None:
                noop(1999, "EUR", n, run)

            return call

        direct = EffectContract(name="bench.direct", operation_id=_operation_id)
        execute = self.executor.execute

        def executed(run: str) -> Callable[[int], None]:
            def call(n: int) -> None:
                execute(direct, arguments(run, n), handler)

            return call

        per_call_us(_WARMUP, decorated("dwarm"))
        fresh_subject, fresh_baseline = interleave(
            self.rounds,
            self.ops,
            lambda r: decorated(f"dec{r}"),
            lambda r: executed(f"dir{r}"),
        )
        self.created += _WARMUP + 2 * self.rounds * self.ops
        replay_subject, replay_baseline = interleave(
            self.rounds,
            self.ops,
            lambda _: decorated("dec0"),
            lambda _: executed("dir0"),
        )
        subject = "@effect-decorated function, called"
        baseline = "EffectExecutor.execute with the equivalent contract"
        return (
            Comparison(
                subject,
                baseline,
                fresh_subject,
                fresh_baseline,
                target=1.1,
                note="fresh operations",
            ),
            Comparison(
                subject,
                baseline,
                replay_subject,
                replay_baseline,
                note="replays: no I/O but one read, so the decorator's own work shows most",
            ),
        )


def count_calls(ledger: EffectLedger, calls: int = 10) -> dict[str, float]:
    """Ledger reads and commits per fresh guarded call and per replay, averaged over ``calls``."""
    counting = CountingLedger(ledger)
    executor = EffectExecutor(counting)
    for n in range(calls):
        _check(executor.execute(CONTRACT, arguments("count", n), handler), replayed=False)
    fresh_writes, fresh_reads = counting.writes, counting.reads
    for n in range(calls):
        _check(executor.execute(CONTRACT, arguments("count", n), handler), replayed=True)
    return {
        "commits_per_call": fresh_writes / calls,
        "reads_per_call": fresh_reads / calls,
        "commits_per_replay": (counting.writes - fresh_writes) / calls,
        "reads_per_replay": (counting.reads - fresh_reads) / calls,
    }
