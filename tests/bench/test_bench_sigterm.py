"""A bench or matrix run stopped by SIGTERM still removes everything it made, and exits 143.

Python's default answer to SIGTERM ends the process without running any
``finally``, which left the bench's ledger directory (SQLite) or its
``ebench_<pid>_*`` schemas (PostgreSQL), and the matrix's schema, behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _start(module: str, *args: str) -> subprocess.Popen[str]:
    """Run ``python -m module *args`` from the repository root, as CI does."""
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _stop_when(process: subprocess.Popen[str], started: str) -> str:
    """SIGTERM ``process`` once its stderr says ``started``; return all its stderr."""
    assert process.stderr is not None
    seen = []
    deadline = time.monotonic() + 120
    for line in process.stderr:
        seen.append(line)
        if started in line or time.monotonic() > deadline:
            break
    assert any(started in line for line in seen), "".join(seen)
    os.kill(process.pid, signal.SIGTERM)
    _, rest = process.communicate(timeout=120)
    return "".join(seen) + rest


def _schemas(url: str, prefix: str) -> list[str]:
    psycopg = pytest.importorskip("psycopg")
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE %s", (f"{prefix}%",)
        ).fetchall()
    return [row[0] for row in rows]


def test_a_bench_stopped_by_sigterm_removes_its_ledgers(backend: str, tmp_path: Path, request):
    """Mid-run SIGTERM: exit 143, one line saying so, no ledger directory or schema left."""
    url = request.getfixturevalue("postgres_url") if backend == "postgres" else None
    db = url or str(tmp_path)
    process = _start(
        "benchmarks", "--backend", backend, "--db", db, "--ops", "50", "--rounds", "50"
    )
    stderr = _stop_when(process, "bench: guarded calls")
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert "bench: stopped by SIGTERM" in stderr
    if url is None:
        assert list(tmp_path.iterdir()) == []
    else:
        assert _schemas(url, f"ebench_{process.pid}_") == []


def test_a_matrix_stopped_by_sigterm_drops_its_schema(postgres_url: str):
    """The PostgreSQL matrix's schema of its own is dropped when SIGTERM stops the run."""
    arguments = ["--backend", "postgres", "--db", postgres_url, "--episodes", "5000", "--seed", "3"]
    process = _start("proofs.matrix", *arguments)
    stderr = _stop_when(process, "matrix episodes:")
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert "matrix: stopped by SIGTERM" in stderr
    assert _schemas(postgres_url, f"ematrix_{process.pid}_") == []
