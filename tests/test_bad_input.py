"""Bad input is refused with a named error before anything is recorded or sent (issue 14).

Every row gives an input that used to surface as a raw ``OverflowError``,
``TypeError``, ``UnicodeEncodeError`` or ``RecursionError`` (or was accepted on
one backend and failed on the other), the error it must raise instead, and the
parameter its message must name. Each row runs on both backends; each checks
the fake provider received no request and the ledger is exactly as it was.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import effectguard
from effectguard import (
    INJECTED,
    ConfigurationError,
    EffectContract,
    EffectExecutor,
    EffectLedger,
    InvalidRequestError,
    SQLiteEffectLedger,
    effect,
    open_ledger,
)
from effectguard._fingerprint import MAX_JSON_DEPTH
from effectguard.cli.ops import main as ops_main
from effectguard.testkit import FakePaymentProvider, ManualClock

INF = float("inf")
ARGS = {"invoice_id": "INV-1", "amount_cents": 1250}
SEEDED = "invoice:INV-0:capture"


def _deep_list(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


def _deep_dict(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"a": value}
    return value


DEEP = _deep_list(100_000)
DEEP_DICT = _deep_dict(100_000)


def _contract(**fields: Any) -> EffectContract:
    return EffectContract(
        name="capture",
        operation_id=fields.pop("operation_id", lambda a: f"invoice:{a['invoice_id']}:capture"),
        provider_idempotency_key=fields.pop(
            "provider_idempotency_key", lambda a: f"capture:{a['invoice_id']}"
        ),
        **fields,
    )


@dataclass
class World:
    """One row's ledger, provider and clock."""

    ledger: EffectLedger
    provider: FakePaymentProvider
    clock: ManualClock

    def executor(self, **options: Any) -> EffectExecutor:
        """An executor on this row's ledger and clock."""
        return EffectExecutor(self.ledger, clock=self.clock, **options)

    def execute(self, contract: EffectContract, arguments: Any = None, **call: Any) -> Any:
        """Run the provider's capture under ``contract``."""
        args = ARGS if arguments is None else arguments
        return self.executor().execute(contract, args, self.provider.handler, **call)

    def tool(self, **options: Any) -> Callable[..., Any]:
        """Decorate a capture tool with ``options`` on this row's executor, and return it."""
        provider = self.provider

        @effect(
            operation_id="invoice:{invoice_id}:capture",
            idempotency_key="capture:{invoice_id}",
            executor=self.executor(),
            **options,
        )
        def capture(
            invoice_id: str, amount_cents: int, note: Any = None, *, idempotency_key: str = INJECTED
        ) -> dict[str, Any]:
            return provider.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)

        return capture


def _configure(world: World, **waits: Any) -> None:
    effectguard.configure(world.ledger, **waits).restore()


def _confirm(operation_id: str, output: Any = None) -> Callable[[World], Any]:
    def act(world: World) -> Any:
        return world.ledger.confirm(
            operation_id,
            output=output,
            provider_operation_id=None,
            actor="alice",
            reason="checked with the provider",
            evidence_reference="T-1",
        )

    return act


#: (id, error, what the message names, action on the row's world)
ROWS: list[tuple[str, type[Exception], str, Callable[[World], Any]]] = [
    # Timeouts and leases past what a thread or the ledger can represent.
    ("timeout=inf", ConfigurationError, "handler_timeout", lambda w: w.tool(timeout=INF)(**ARGS)),
    ("timeout=1e10", ConfigurationError, "handler_timeout", lambda w: w.tool(timeout=1e10)(**ARGS)),
    (
        "contract handler_timeout=inf",
        ConfigurationError,
        "handler_timeout",
        lambda w: w.execute(_contract(handler_timeout=INF)),
    ),
    ("lease=inf", ConfigurationError, "lease_seconds", lambda w: w.tool(lease=INF)(**ARGS)),
    ("lease=1e300", ConfigurationError, "lease_seconds", lambda w: w.tool(lease=1e300)(**ARGS)),
    ("lease='30'", ConfigurationError, "lease_seconds", lambda w: w.tool(lease="30")(**ARGS)),
    (
        "max_output_bytes='big'",
        ConfigurationError,
        "max_output_bytes",
        lambda w: w.tool(max_output_bytes="big")(**ARGS),
    ),
    (
        "contract wait_for_peer='1'",
        ConfigurationError,
        "wait_for_peer",
        lambda w: w.tool(wait_for_peer="1")(**ARGS),
    ),
    (
        "contract deadline=inf",
        ConfigurationError,
        "deadline",
        lambda w: w.tool(deadline=INF)(**ARGS),
    ),
    (
        "contract retry_wait_max=inf",
        ConfigurationError,
        "retry_wait_max",
        lambda w: w.tool(retry_wait_max=INF)(**ARGS),
    ),
    # Per-call waits.
    (
        "execute(wait_for_peer='1')",
        InvalidRequestError,
        "wait_for_peer",
        lambda w: w.execute(_contract(), wait_for_peer="1"),
    ),
    (
        "execute(wait_for_peer=inf)",
        InvalidRequestError,
        "wait_for_peer",
        lambda w: w.execute(_contract(), wait_for_peer=INF),
    ),
    # Executor and configure() options.
    *[
        (
            f"EffectExecutor({name}={value!r})",
            ConfigurationError,
            name,
            lambda w, name=name, value=value: w.executor(**{name: value}),
        )
        for name in ("retry_wait_initial", "retry_wait_max", "deadline", "poll_interval")
        for value in ("1", INF, float("nan"))
    ],
    (
        "EffectExecutor(wait_for_peer='1')",
        ConfigurationError,
        "wait_for_peer",
        lambda w: w.executor(wait_for_peer="1"),
    ),
    *[
        (
            f"configure({name}='1')",
            ConfigurationError,
            name,
            lambda w, name=name: _configure(w, **{name: "1"}),
        )
        for name in ("retry_wait_initial", "retry_wait_max", "deadline", "wait_for_peer")
    ],
    # Values with no canonical JSON form.
    (
        "lone surrogate in an argument",
        TypeError,
        r"\$\.invoice_id .*lone surrogate",
        lambda w: w.tool()(invoice_id="\ud800", amount_cents=1),
    ),
    (
        "lone surrogate in a key of an argument",
        TypeError,
        r"\$\.note .*lone surrogate",
        lambda w: w.tool()(invoice_id="INV-1", amount_cents=1, note={"\udc80": 1}),
    ),
    (
        "argument nested 100,000 deep",
        TypeError,
        rf"\$\.note\[0\].*nested more than {MAX_JSON_DEPTH} levels",
        lambda w: w.tool()(invoice_id="INV-1", amount_cents=1, note=DEEP),
    ),
    (
        "argument dict nested 100,000 deep",
        TypeError,
        rf"\$\.note\.a\.a.*nested more than {MAX_JSON_DEPTH} levels",
        lambda w: w.execute(_contract(), {**ARGS, "note": DEEP_DICT}),
    ),
    (
        "argument nested 100,000 deep, async",
        TypeError,
        r"\$\.note\[0\]",
        lambda w: asyncio.run(
            w.executor().execute_async(_contract(), {**ARGS, "note": DEEP}, w.provider.handler)
        ),
    ),
    # Operation ids and provider keys no ledger stores alike.
    *[
        (
            f"operation id {text!r}",
            InvalidRequestError,
            "operation_id",
            lambda w, text=text: w.execute(_contract(operation_id=lambda a: text)),
        )
        for text in ("   ", "\t\n", "a\x00b", "op\ud800")
    ],
    (
        "provider key with NUL",
        InvalidRequestError,
        "provider idempotency key",
        lambda w: w.execute(_contract(provider_idempotency_key=lambda a: "k\x00")),
    ),
    # Operator reads and writes.
    ("ledger.get NUL", InvalidRequestError, "operation id", lambda w: w.ledger.get("a\x00b")),
    ("ledger.get surrogate", InvalidRequestError, "operation id", lambda w: w.ledger.get("\udcff")),
    ("ledger.get blank", InvalidRequestError, "operation id", lambda w: w.ledger.get(" ")),
    ("ledger.events NUL", InvalidRequestError, "operation id", lambda w: w.ledger.events("a\x00")),
    ("ledger.confirm NUL id", InvalidRequestError, "operation id", _confirm("a\x00b")),
    ("ledger.confirm deep output", InvalidRequestError, "output", _confirm(SEEDED, DEEP)),
    ("ledger.confirm surrogate output", InvalidRequestError, "output", _confirm(SEEDED, "\ud800")),
]


def _sqlite_bytes(target: str) -> tuple[str | None, ...]:
    """Digests of a SQLite ledger file and its WAL; what any write would change."""
    return tuple(
        hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None
        for path in (Path(target), Path(f"{target}-wal"))
    )


def _snapshot(ledger: EffectLedger) -> list[Any]:
    return [(r, ledger.events(r.operation_id)) for r in ledger.list_operations(limit=1000)]


@pytest.fixture
def world(ledger: EffectLedger) -> World:
    """A ledger holding one confirmed capture (SEEDED), a fresh provider and a manual clock."""
    clock = ManualClock(1_700_000_000.0)
    seed = FakePaymentProvider()
    result = EffectExecutor(ledger, clock=clock).execute(
        _contract(), {"invoice_id": "INV-0", "amount_cents": 1}, seed.handler
    )
    assert result.operation_id == SEEDED
    return World(ledger, FakePaymentProvider(), clock)


@pytest.mark.parametrize(
    ("error", "names", "act"), [row[1:] for row in ROWS], ids=[row[0] for row in ROWS]
)
def test_bad_input_is_refused_before_anything_is_recorded_or_sent(
    world: World,
    backend: str,
    ledger_target: str,
    error: type[Exception],
    names: str,
    act: Callable[[World], Any],
) -> None:
    """Each bad input raises its named error; the provider saw nothing, the ledger is unchanged."""
    before = _snapshot(world.ledger)
    stored = _sqlite_bytes(ledger_target) if backend == "sqlite" else None
    with pytest.raises(error, match=names) as caught:
        act(world)
    assert isinstance(caught.value, (effectguard.EffectGuardError, TypeError))
    assert world.provider.requests == 0
    assert world.provider.committed() == 0
    assert _snapshot(world.ledger) == before
    if stored is not None:
        assert _sqlite_bytes(ledger_target) == stored


def test_a_value_at_the_nesting_limit_is_stored_and_replayed(world: World) -> None:
    """MAX_JSON_DEPTH levels of nesting are accepted: the limit refuses only deeper values."""
    tool = world.tool()
    # MAX_JSON_DEPTH containers in all: the arguments mapping and 199 nested lists.
    note = _deep_list(MAX_JSON_DEPTH - 2)
    assert tool(invoice_id="INV-1", amount_cents=1, note=note)["id"]
    assert tool(invoice_id="INV-1", amount_cents=1, note=note)["id"]
    assert world.provider.committed() == 1


# -- ledger constructors -----------------------------------------------------------------

_BOGUS_POSTGRES = "postgresql://nobody@127.0.0.1:1/none"

CONSTRUCTORS: list[tuple[str, str, Callable[[Path], Any]]] = [
    ("busy_timeout=inf", "busy_timeout", lambda p: open_ledger(p, busy_timeout=INF)),
    ("busy_timeout=1e10", "busy_timeout", lambda p: open_ledger(p, busy_timeout=1e10)),
    ("busy_timeout='x'", "busy_timeout", lambda p: SQLiteEffectLedger(p, busy_timeout="x")),
    ("synchronous=1", "synchronous", lambda p: SQLiteEffectLedger(p, synchronous=1)),
    ("NUL in the path, open_ledger", "NUL", lambda p: open_ledger(f"{p}\x00x")),
    ("NUL in the path, SQLite", "NUL", lambda p: SQLiteEffectLedger(f"{p}\x00x")),
    ("NUL in the path, configure", "NUL", lambda p: effectguard.configure(f"{p}\x00x")),
    ("postgres timeout=inf", "timeout", lambda p: open_ledger(_BOGUS_POSTGRES, timeout=INF)),
    ("postgres timeout='x'", "timeout", lambda p: open_ledger(_BOGUS_POSTGRES, timeout="x")),
]


@pytest.mark.parametrize(
    ("names", "make"), [row[1:] for row in CONSTRUCTORS], ids=[row[0] for row in CONSTRUCTORS]
)
def test_a_ledger_that_could_only_fail_later_is_refused_at_construction(
    tmp_path: Path, names: str, make: Callable[[Path], Any]
) -> None:
    """Bad ledger options are a ConfigurationError naming them, and no file is created."""
    path = tmp_path / "ledger.db"
    with pytest.raises(ConfigurationError, match=names):
        make(path)
    assert list(tmp_path.iterdir()) == []


# -- the operator CLI --------------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    [
        ["show", "a\x00b"],
        ["events", "\udcff"],
        ["show", "   "],
        ["reject", "a\x00b", "--actor", "a", "--reason", "r", "--evidence-reference", "T"],
        [
            "confirm",
            SEEDED,
            "--output-json",
            "[" * 100_000 + "]" * 100_000,
            "--actor",
            "a",
            "--reason",
            "r",
            "--evidence-reference",
            "T",
        ],
    ],
    ids=["show NUL", "events surrogate", "show blank", "reject NUL", "confirm deep output"],
)
def test_the_operator_cli_refuses_bad_ids_and_outputs_in_one_line(
    world: World, backend: str, ledger_target: str, arguments: list[str]
) -> None:
    """A bad operation id or output is one ``Error:`` line, a non-zero exit, an unchanged ledger."""
    before = _snapshot(world.ledger)
    stored = _sqlite_bytes(ledger_target) if backend == "sqlite" else None
    result = CliRunner().invoke(ops_main, ["--db", ledger_target, *arguments])
    assert not isinstance(result.exception, (RecursionError, UnicodeError, ValueError))
    assert result.exit_code != 0, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: "), result.stderr
    assert "operation id" in lines[0] or "--output-json" in lines[0]
    assert _snapshot(world.ledger) == before
    if stored is not None:
        assert _sqlite_bytes(ledger_target) == stored


def test_an_undecodable_id_on_the_real_command_line_is_one_error_line(tmp_path: Path) -> None:
    """Non-UTF-8 argv bytes arrive as lone surrogates: one clear error line, exit non-zero."""
    path = tmp_path / "ledger.db"
    ledger = open_ledger(path)
    EffectExecutor(ledger).execute(_contract(), ARGS, FakePaymentProvider().handler)
    before = _snapshot(ledger)
    ledger.close()
    stored = path.read_bytes()
    command = [sys.executable, "-m", "effectguard.cli.ops", "--db", os.fsencode(path), "show"]
    command.append(b"op\xff")
    done = subprocess.run(
        command,
        capture_output=True,
        check=False,
        env={**os.environ, "LC_ALL": "C.UTF-8", "PYTHONUTF8": "1"},
    )
    lines = done.stderr.decode("utf-8", "replace").splitlines()
    assert done.returncode != 0
    assert len(lines) == 1, lines
    assert lines[0].startswith("Error: ")
    assert "operation id" in lines[0]
    assert path.read_bytes() == stored
    ledger = open_ledger(path)
    assert _snapshot(ledger) == before
    ledger.close()
