"""Where a decorated tool finds its executor: given, lent, or configured for the process."""

from __future__ import annotations

from pathlib import Path

import pytest

from effectguard import (
    ConfigurationError,
    EffectExecutor,
    SQLiteEffectLedger,
    configure,
    effect,
    use_executor,
)
from effectguard._decorator import default_executor


@pytest.fixture(autouse=True)
def no_process_default():
    """Every test starts and ends without a process default executor."""
    assert default_executor() is None
    yield
    assert default_executor() is None


def _ledger_at(path: Path) -> SQLiteEffectLedger:
    return SQLiteEffectLedger(path)


def test_no_executor_is_an_error_naming_all_three_ways(tmp_path):
    """With no executor anywhere, a call fails before dispatch, naming the three ways to set one."""
    calls = []

    @effect(operation_id="job:{n}")
    def job(n: int) -> int:
        calls.append(n)
        return n

    with pytest.raises(ConfigurationError) as info:
        job(1)
    message = str(info.value)
    assert "\n" not in message
    assert "executor=" in message
    assert "use_executor" in message
    assert "configure(ledger=" in message
    assert isinstance(info.value, ValueError)
    assert calls == []


def test_resolution_order_is_given_then_lent_then_configured(tmp_path):
    """executor= wins over a lent executor, which wins over the process default."""
    given = EffectExecutor(_ledger_at(tmp_path / "given.db"))
    lent = EffectExecutor(_ledger_at(tmp_path / "lent.db"))

    @effect(operation_id="own:{n}", executor=given)
    def own(n: int) -> int:
        return n

    @effect(operation_id="shared:{n}")
    def shared(n: int) -> int:
        return n

    with configure(ledger=tmp_path / "default.db") as configured:
        default = configured.executor
        with use_executor(lent):
            own(1)
            shared(1)
        shared(2)
        assert [r.operation_id for r in default.ledger.list_operations()] == ["shared:2"]
    assert [r.operation_id for r in given.ledger.list_operations()] == ["own:1"]
    assert [r.operation_id for r in lent.ledger.list_operations()] == ["shared:1"]
    given.ledger.close()
    lent.ledger.close()


def test_lending_ends_with_the_block(tmp_path):
    """Outside its with-block a lent executor is gone, and nested lending restores the outer one."""
    outer = EffectExecutor(_ledger_at(tmp_path / "outer.db"))
    inner = EffectExecutor(_ledger_at(tmp_path / "inner.db"))

    @effect(operation_id="job:{n}")
    def job(n: int) -> int:
        return n

    with use_executor(outer):
        with use_executor(inner):
            job(1)
        job(2)
    with pytest.raises(ConfigurationError):
        job(3)
    assert [r.operation_id for r in inner.ledger.list_operations()] == ["job:1"]
    assert [r.operation_id for r in outer.ledger.list_operations()] == ["job:2"]
    with pytest.raises(TypeError, match="EffectExecutor"):
        use_executor(inner.ledger).__enter__()  # type: ignore[arg-type]
    outer.ledger.close()
    inner.ledger.close()


def test_configure_takes_a_path_a_ledger_or_an_executor(tmp_path, clock):
    """configure() opens a path, adopts a ledger or an executor, and restores the previous one."""
    path = tmp_path / "ledger.db"

    @effect(operation_id="job:{n}")
    def job(n: int) -> int:
        return n

    with configure(ledger=str(path), clock=clock) as by_path:
        assert job(1) == 1
        assert by_path.executor.ledger.get("job:1").status.value == "CONFIRMED"
        ledger = SQLiteEffectLedger(tmp_path / "object.db")
        with configure(ledger=ledger) as by_object:
            assert default_executor() is by_object.executor
            assert by_object.executor.ledger is ledger
        assert default_executor() is by_path.executor
        executor = EffectExecutor(ledger)
        with configure(executor=executor):
            assert default_executor() is executor
        ledger.list_operations()  # a ledger configure() did not open stays open
        ledger.close()
    with pytest.raises(Exception, match="closed"):
        by_path.executor.ledger.list_operations()  # the one it opened is closed with it


def test_configure_refuses_ambiguous_settings(tmp_path):
    """configure() needs exactly one of ledger= and executor=, and clock= only with ledger=."""
    executor = EffectExecutor(_ledger_at(tmp_path / "x.db"))
    with pytest.raises(ConfigurationError, match="either ledger="):
        configure()
    with pytest.raises(ConfigurationError, match="either ledger="):
        configure(ledger=tmp_path / "y.db", executor=executor)
    with pytest.raises(ConfigurationError, match="clock"):
        configure(executor=executor, clock=lambda: 0.0)
    with pytest.raises(TypeError, match="a ledger is a path"):
        configure(ledger=42)  # type: ignore[arg-type]
    assert not (tmp_path / "y.db").exists()
    executor.ledger.close()


def test_executor_argument_must_be_an_executor(tmp_path):
    """@effect(executor=...) with something else is a TypeError at decoration."""
    ledger = _ledger_at(tmp_path / "x.db")
    with pytest.raises(TypeError, match="EffectExecutor"):
        effect(operation_id="x:{n}", executor=ledger)(lambda n: n)  # type: ignore[arg-type]
    ledger.close()


def test_restore_is_idempotent_and_leaves_a_newer_default(tmp_path):
    """restore() twice is harmless, and never undoes a default configured after it."""
    first = configure(ledger=tmp_path / "a.db")
    second = configure(ledger=tmp_path / "b.db")
    first.restore()
    first.restore()
    assert default_executor() is second.executor
    second.restore()


@pytest.mark.parametrize(
    ("target", "match"),
    [
        ("mysql://app@db.example/ledger", "scheme 'mysql'.*postgresql://"),
        ("", "empty"),
        ("{tmp}/no/such/dir/ledger.db", "does not exist"),
    ],
)
def test_configure_checks_the_ledger_when_given(tmp_path, target, match):
    """A ledger that can never work is refused by configure(), not at the first tool call."""
    with pytest.raises(ConfigurationError, match=match):
        configure(ledger=target.format(tmp=tmp_path))
    assert default_executor() is None
    assert list(tmp_path.iterdir()) == []
