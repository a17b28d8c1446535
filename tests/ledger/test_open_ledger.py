"""``open_ledger`` picks a backend from its target, and SQLite never needs the PostgreSQL driver."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from effectguard import ConfigurationError, SQLiteEffectLedger, open_ledger


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
        from effectguard import open_ledger
        from effectguard import ConfigurationError

        ledger = open_ledger({str(tmp_path / "ledger.db")!r})
        assert ledger.list_operations() == []
        try:
            open_ledger("postgresql://localhost/db")
        except ConfigurationError as exc:
            assert "pip install 'effectguard[postgres]'" in str(exc), exc
        else:
            raise AssertionError("no error")
        try:
            from effectguard.ledger.postgres import PostgresEffectLedger
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


@pytest.mark.parametrize("target", ["mysql://app:hunter2@db.example/ledger", "sqlite:///x.db"])
def test_a_url_of_another_scheme_names_the_supported_ones(target):
    """mysql:// (or any other scheme) is refused at once, naming what is supported, no password."""
    with pytest.raises(ConfigurationError, match="postgresql://") as info:
        open_ledger(target)
    assert "hunter2" not in str(info.value)


@pytest.mark.parametrize("target", ["", "   "])
def test_an_empty_target_is_refused(target):
    """An empty ledger target is a ConfigurationError, not a database in the working directory."""
    with pytest.raises(ConfigurationError, match="empty"):
        open_ledger(target)


def test_a_missing_directory_is_refused_and_nothing_is_created(tmp_path):
    """A ledger file whose directory does not exist is refused before anything is created."""
    target = tmp_path / "missing" / "ledger.db"
    with pytest.raises(ConfigurationError, match="does not exist"):
        open_ledger(target)
    assert list(tmp_path.iterdir()) == []


def test_a_directory_is_not_a_ledger_file(tmp_path):
    """Naming a directory is refused with a hint to name a file in it."""
    with pytest.raises(ConfigurationError, match="is a directory"):
        open_ledger(tmp_path)
