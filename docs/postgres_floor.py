"""What the PostgreSQL ledger's storage costs a guarded call, part by part, without its Python.

Run from the repository root, against a database the script may create schemas in::

    python docs/postgres_floor.py URL [ROUNDS]

One real guarded call is made on a ledger schema of its own, and the two
statements the ledger sent for it (the claim and the outcome, one round trip
and one commit each) are recorded with their parameters. Each measure then
sends those same statements again, under new operation ids, over one plain
psycopg autocommit connection: no executor and no ledger code runs. Parts are
left out one at a time: the events (an empty event list), the claims anchor
(its two steps cut out of the claim), the trigger that refuses a pruned id,
the listing indexes. The floor is the bench's by-hand baseline (a one-table
insert and update, one commit each). The last two lines add the Python back:
the ledger's own ``claim`` and ``transition`` called directly, then a whole
guarded call through ``EffectExecutor``. The measures are interleaved in chunks
of 50 calls, so a slow moment of the server lands on all. Every schema the
script creates is dropped at the end.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import secrets
import sys
from collections.abc import Callable, Iterator
from typing import Any

import _checkout  # noqa: F401 - puts the checkout's benchmarks/ on sys.path
import psycopg

from benchmarks._calls import CONTRACT, arguments, handler, interleave_named, primitives
from benchmarks._postgres_site import PostgresRaw
from benchmarks._stats import floor_lines
from effectguard import EffectExecutor
from effectguard.ledger.postgres import PostgresEffectLedger

# Calls of each measure per round, run in interleaved chunks of 50.
_CALLS = 800
_INDEXES = ("operations_by_status", "operations_by_contract", "operations_by_update")
_TRIGGER = "operations_not_tombstoned"
# The claim's two anchor steps, from the head update up to the final SELECT.
_ANCHOR_STEPS = re.compile(r", head AS \(UPDATE .*?\), anchor AS \(INSERT .*?FROM head\)")
_IDS = itertools.count(1)
_URL, _ROUNDS = 1, 2  # sys.argv positions


@contextlib.contextmanager
def _recording() -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """Record every statement psycopg sends, with a copy of its parameters, while inside."""
    sent: list[tuple[str, dict[str, Any]]] = []
    original = psycopg.Connection.execute

    def execute(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        if isinstance(params, dict):
            sent.append((str(query), dict(params)))
        return original(self, query, params, **kwargs)

    psycopg.Connection.execute = execute  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        psycopg.Connection.execute = original  # type: ignore[method-assign]


class Statements:
    """The claim and outcome one real guarded call sent, ready to send again under new ids."""

    def __init__(self, ledger: PostgresEffectLedger) -> None:
        with _recording() as sent:
            EffectExecutor(ledger).execute(CONTRACT, arguments("template", 0), handler)
        claims = [s for s in sent if s[0].startswith("WITH op AS (INSERT")]
        outcomes = [s for s in sent if s[0].startswith("WITH op AS (UPDATE")]
        if len(claims) != 1 or len(outcomes) != 1:
            msg = f"expected one claim and one outcome statement, the call sent {len(sent)}"
            raise SystemExit(msg)
        (self.claim, self.claim_params), (self.outcome, self.outcome_params) = *claims, *outcomes
        # The recorded claim checked its time against the server's; the copies need not.
        self.claim_params["skew"] = None
        self.schema = ledger.schema


class Writer:
    """Sends the recorded statements to ``schema`` under a new id, with the parts asked for."""

    def __init__(self, url: str, recorded: Statements, schema: str, **parts: bool) -> None:
        self.conn = psycopg.connect(url, autocommit=True)
        self.conn.execute("SET TIME ZONE 'UTC'")
        self.conn.execute("SET synchronous_commit = on")
        source = f'"{recorded.schema}".'
        self.claim = recorded.claim.replace(source, f'"{schema}".')
        self.outcome = recorded.outcome.replace(source, f'"{schema}".')
        self.claim_params = dict(recorded.claim_params)
        self.outcome_params = dict(recorded.outcome_params)
        if not parts.get("events", True):
            self.claim_params["events"] = self.outcome_params["events"] = "[]"
        if not parts.get("anchor", True):
            self.claim, cut = _ANCHOR_STEPS.subn("", self.claim)
            if cut != 1:
                msg = "the claim statement no longer has the anchor steps this script cuts out"
                raise SystemExit(msg)

    def __call__(self) -> None:
        """One call's two statements: claim and commit, outcome and commit."""
        operation_id = f"floor:{next(_IDS)}"
        self.conn.execute(self.claim, {**self.claim_params, "operation_id": operation_id})
        self.conn.execute(self.outcome, {**self.outcome_params, "operation_id": operation_id})

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()


def measure(url: str, rounds: int) -> dict[str, list[float]]:
    """Microseconds per call of each measure, per round; drops its schemas at the end."""
    prefix = f"pgfloor_{os.getpid()}_{secrets.token_hex(3)}"
    schemas = {name: f"{prefix}_{name}" for name in ("full", "plain", "bare", "raw")}
    opened: list[Any] = []
    try:
        ledgers = {}
        for name in ("full", "plain", "bare"):
            ledgers[name] = PostgresEffectLedger(url, schema=schemas[name])
            opened.append(ledgers[name])
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'ALTER TABLE "{schemas["plain"]}".operations DISABLE TRIGGER {_TRIGGER}')
            for index in _INDEXES:
                conn.execute(f'DROP INDEX "{schemas["bare"]}".{index}')
        recorded = Statements(ledgers["full"])
        raw = PostgresRaw(url, schemas["raw"])
        opened.append(raw)
        counter = itertools.count()
        ledger = ledgers["full"]
        executor = EffectExecutor(ledger)

        def by_hand() -> None:
            n = next(counter)
            raw.record(f"raw:{n}", json.dumps(arguments("raw", n)), json.dumps({"n": n}))

        def guarded() -> None:
            executor.execute(CONTRACT, arguments("guarded", next(counter)), handler)

        called = primitives(ledger, "primitives")

        def writer(schema: str, **parts: bool) -> Writer:
            made = Writer(url, recorded, schemas[schema], **parts)
            opened.append(made)
            return made

        measures: dict[str, Callable[[], None]] = {
            "floor: by hand, one table, two commits": by_hand,
            "the ledger's two statements, as sent": writer("full"),
            "  without the chained events": writer("full", events=False),
            "  without the claims anchor": writer("full", anchor=False),
            "  without the pruned-id trigger": writer("plain"),
            "  without the listing indexes": writer("bare"),
            "the ledger's claim and transition, called": lambda: called(next(counter)),
            "a guarded call (EffectExecutor.execute)": guarded,
        }
        return interleave_named(measures, rounds, _CALLS)
    finally:
        for thing in reversed(opened):
            thing.close()
        with psycopg.connect(url, autocommit=True) as conn:
            for schema in schemas.values():
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def main() -> None:
    """Print each measure's median microseconds per call and its ratio to the floor."""
    if len(sys.argv) <= _URL or not sys.argv[_URL].startswith(("postgresql://", "postgres://")):
        sys.exit("usage: python docs/postgres_floor.py postgresql://URL [ROUNDS]")
    rounds = int(sys.argv[_ROUNDS]) if len(sys.argv) > _ROUNDS else 5
    times = measure(sys.argv[_URL], rounds)
    for line in floor_lines(times):
        sys.stdout.write(f"{line}\n")


if __name__ == "__main__":
    main()
