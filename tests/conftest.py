"""Shared fixtures: every ledger test runs against each backend through ``make_ledger``.

PostgreSQL tests need ``EFFECTGUARD_TEST_POSTGRES_URL`` (a database they may
create and drop schemas in); without it they skip, unless
``EFFECTGUARD_REQUIRE_POSTGRES=1`` (as in CI), which makes that a failure.
Each test gets its own fresh schema, dropped afterwards.
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from extras_support import REQUIRE_EXTRAS, extras_required, skip_is_excused
from postgres_support import POSTGRES_URL, REQUIRE_POSTGRES, postgres_required, with_schema

from effectguard import EffectLedger, open_ledger

#: Backends every conformance test runs against.
BACKENDS = ["sqlite", "postgres"]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Generator[None, Any, None]:
    """In CI, a PostgreSQL or optional-extra test that skipped for any reason fails.

    With ``EFFECTGUARD_REQUIRE_POSTGRES=1`` a test marked ``postgres`` may not skip;
    with ``EFFECTGUARD_REQUIRE_EXTRAS=1`` no test may skip at all, since every
    extra is installed and nothing else is a reason to skip in this suite, except
    an extra named in ``EFFECTGUARD_ABSENT_EXTRAS`` (tested in another environment).
    """
    outcome = yield
    report = outcome.get_result()
    if not report.skipped:
        return
    _fold_postgres_skip(report)
    if postgres_required() and item.get_closest_marker("postgres"):
        report.outcome = "failed"
        report.longrepr = f"skipped, but {REQUIRE_POSTGRES}=1 is set: {report.longrepr}"
    elif extras_required() and not skip_is_excused(str(report.longrepr)):
        report.outcome = "failed"
        report.longrepr = f"skipped, but {REQUIRE_EXTRAS}=1 is set: {report.longrepr}"


#: Where every "no PostgreSQL" skip is reported from, so ``-ra`` folds them into one line.
_POSTGRES_SKIP_HOME = str(Path(__file__).resolve())


def _fold_postgres_skip(report: pytest.TestReport) -> None:
    """Report a skip for want of PostgreSQL from one place: one ``-ra`` line, not hundreds."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        reason = str(longrepr[2])
        if reason.startswith("Skipped: PostgreSQL tests skipped"):
            report.longrepr = (_POSTGRES_SKIP_HOME, 0, reason)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that runs on PostgreSQL, so ``-m "not postgres"`` deselects them."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        on_postgres = callspec is not None and callspec.params.get("backend") == "postgres"
        if on_postgres or "postgres_url" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.postgres)


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """The PostgreSQL server's URL; skips (or fails, when required) without a reachable one."""
    url = os.environ.get(POSTGRES_URL, "").strip()

    def unavailable(reason: str) -> None:
        if postgres_required():
            pytest.fail(f"{reason}, and {REQUIRE_POSTGRES}=1 is set", pytrace=False)
        pytest.skip(f"PostgreSQL tests skipped: {reason}")

    if not url:
        unavailable(
            f"set {POSTGRES_URL}=postgresql://USER@HOST:5432/DBNAME (a database they may "
            "create and drop schemas in) to run them"
        )
    try:
        import psycopg  # noqa: PLC0415 - only PostgreSQL tests need the driver
    except ModuleNotFoundError:
        unavailable("psycopg is not installed: pip install -e '.[dev,postgres]'")
    try:
        psycopg.connect(url, connect_timeout=5).close()
    except psycopg.Error as exc:
        first = str(exc).strip().splitlines()[0]
        unavailable(f"cannot reach the server {POSTGRES_URL} names: {first}")
    return url


@pytest.fixture
def postgres_schemas(postgres_url: str) -> Iterator[Callable[[], str]]:
    """Make schema names nobody uses yet; each one is dropped after the test, whoever created it."""
    made: list[str] = []

    def make() -> str:
        made.append(f"eg_test_{uuid.uuid4().hex[:16]}")
        return made[-1]

    yield make
    if made:
        import psycopg  # noqa: PLC0415 - optional; imported only when a PostgreSQL server is given

        with psycopg.connect(postgres_url, autocommit=True) as conn:
            for schema in made:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def postgres_target(postgres_url: str, postgres_schemas: Callable[[], str]) -> str:
    """A ``postgresql://`` URL naming this test's own, empty ledger schema."""
    return with_schema(postgres_url, postgres_schemas())


class FakeClock:
    """A clock tests move by hand, so lease and deadline tests never sleep."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        """Return the current fake time in epoch seconds."""
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the fake time forward."""
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    """A hand-moved clock starting at a fixed instant."""
    return FakeClock()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The name of the ledger backend under test."""
    return str(request.param)


@pytest.fixture
def ledger_target(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """What ``open_ledger`` takes to open this test's own, empty ledger."""
    if backend == "sqlite":
        return str(tmp_path / "ledger.db")
    if backend == "postgres":
        target: str = request.getfixturevalue("postgres_target")
        return target
    raise AssertionError(backend)


@pytest.fixture
def ledger_sql(backend: str, ledger_target: str) -> Callable[..., None]:
    """Run one SQL statement (``?`` placeholders) on this test's ledger storage, bypassing it.

    For tampering: tables and columns have the same names on every backend,
    except an event's time, which the statement writes as ``{at}``.
    """

    def execute(statement: str, *params: Any) -> None:
        statement = statement.replace("{at}", "at_us" if backend == "sqlite" else "at")
        if backend == "sqlite":
            conn = sqlite3.connect(ledger_target)
            try:
                with conn:
                    conn.execute(statement, params)
            finally:
                conn.close()
            return
        import psycopg  # noqa: PLC0415 - optional; imported only when a PostgreSQL server is given

        from effectguard.ledger.postgres import split_target  # noqa: PLC0415 - needs psycopg

        conninfo, schema = split_target(ledger_target, None)
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(f'SET search_path TO "{schema}"')
            conn.execute(statement.replace("?", "%s"), params)

    return execute


@pytest.fixture
def make_ledger(ledger_target: str) -> Iterator[Callable[..., EffectLedger]]:
    """Open (another handle on) this test's ledger; every handle is closed afterwards."""
    opened: list[EffectLedger] = []

    def make(**options: Any) -> EffectLedger:
        ledger = open_ledger(ledger_target, **options)
        opened.append(ledger)
        return ledger

    yield make
    for ledger in opened:
        ledger.close()


@pytest.fixture
def ledger(make_ledger: Callable[..., EffectLedger]) -> EffectLedger:
    """This test's ledger, on the backend under test."""
    return make_ledger()
