"""PostgreSQL test plumbing shared by conftest and the PostgreSQL test modules.

Kept out of ``conftest.py`` because test modules cannot import a conftest by
name reliably: every test directory may have its own ``conftest``.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

POSTGRES_URL = "EFFECTGUARD_TEST_POSTGRES_URL"
REQUIRE_POSTGRES = "EFFECTGUARD_REQUIRE_POSTGRES"


def postgres_required() -> bool:
    """True when PostgreSQL tests must run (CI): a skip of one is then a failure."""
    return os.environ.get(REQUIRE_POSTGRES, "").strip() not in ("", "0")


def import_psycopg() -> Any:
    """Return the psycopg module; skip the calling test module without it (fail when required)."""
    try:
        import psycopg  # noqa: PLC0415 - only PostgreSQL tests need the driver
    except ModuleNotFoundError:
        reason = "psycopg is not installed: pip install -e '.[dev,postgres]'"
        if postgres_required():
            pytest.fail(f"{reason}, and {REQUIRE_POSTGRES}=1 is set", pytrace=False)
        pytest.skip(f"PostgreSQL tests skipped: {reason}", allow_module_level=True)
    return psycopg


def with_schema(url: str, schema: str) -> str:
    """Return ``url`` with its ledger schema set to ``schema`` (a ``?schema=`` parameter)."""
    return f"{url}{'&' if '?' in url else '?'}schema={schema}"
