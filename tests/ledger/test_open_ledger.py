"""``open_ledger`` picks a backend from its target, and SQLite never needs the PostgreSQL driver."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from effectguard.ledger import open_ledger
from effectguard.ledger.sqlite import SQLiteEffectLedger


def test_a_path_opens_a_sqlite_ledger_and_a_ledger_is_returned_as_it_is(tmp_path):
    """A path opens a SQLite ledger; a ledger object passes through unchanged."""
    ledger = open_ledger(tmp_path / "ledger.db")
    try:
        assert isinstance(ledger, SQLiteEffectLedger)
        assert open_ledger(ledger) is ledger
    finally:
        ledger.close()


def test_a_target_of_another_type_is_a_type_error():
    """Anything but a path, a URL or a ledger is a TypeError naming its type."""
    with pytest.raises(TypeError, match="not int"):
        open_ledger(42)  # type: ignore[arg-type]


def test_sqlite_users_never_need_psycopg(tmp_path):
    """Without psycopg, effectguard imports and runs on SQLite; PostgreSQL names the extra."""
    script = textwrap.dedent(
        f"""
        import sys

        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("psycopg", "psycopg_pool", "psycopg_binary"):
                    raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)

        sys.meta_path.insert(0, Block())
        import effectguard
        from effectguard import *
        from effectguard.ledger import open_ledger
        from effectguard.errors import ConfigurationError

        ledger = open_ledger({str(tmp_path / "ledger.db")!r})
        assert ledger.list_operations() == []
        try:
            open_ledger("postgresql://localhost/db")
        except ConfigurationError as exc:
            assert "pip install 'effectguard[postgres]'" in str(exc), exc
        else:
            raise AssertionError("no error")
        try:
            effectguard.PostgresEffectLedger
        except ImportError as exc:
            assert "effectguard[postgres]" in str(exc), exc
        else:
            raise AssertionError("no error")
        assert "psycopg" not in sys.modules
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert done.stdout.strip() == "ok", done.stderr
