"""The library logs only through `logging`, installs no handler, and never guards by assert."""

from __future__ import annotations

import ast
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

import effectguard

PACKAGE = Path(effectguard.__file__).parent

_IMPORT_EVERYTHING = """
import json, logging, pkgutil, importlib, re

class Keep(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []
    def emit(self, record):
        # effectguard's own records: a driver may log about itself when imported
        # (psycopg 3.1 names the C implementation it did not find).
        if record.name.startswith("effectguard"):
            self.records.append(record.name + ": " + record.getMessage())

keep = Keep()
logging.getLogger().addHandler(keep)
logging.getLogger().setLevel(logging.DEBUG)
import effectguard
missing = {}
skip_unimportable = lambda name: None  # an extra's package: imported (and said) below
for module in pkgutil.walk_packages(effectguard.__path__, "effectguard.", skip_unimportable):
    if module.name.endswith("__main__"):
        continue
    try:
        importlib.import_module(module.name)
    except ImportError as exc:  # the adapters raise ImportError naming their extra
        # An optional extra's module without its extra: said, not hidden. A module of
        # effectguard's own that is missing is a real failure.
        name = exc.name or getattr(exc.__cause__, "name", None)
        if name is None or name.split(".")[0] == "effectguard":
            raise
        extra = re.search(r"effectguard\\[([^\\]]+)\\]", str(exc))
        missing[module.name] = [name, extra.group(1) if extra else None]
loggers = [
    name for name, logger in logging.root.manager.loggerDict.items()
    if name.startswith("effectguard") and isinstance(logger, logging.Logger) and logger.handlers
]
print(json.dumps({"records": keep.records, "with_handlers": loggers, "missing": missing}))
"""


def test_importing_effectguard_logs_nothing_and_installs_no_handler():
    """In a fresh interpreter, importing every module logs no record and adds no handler.

    A module whose extra is not installed cannot be imported: the rest are
    checked, then the test skips naming them (a failure in CI, where every
    extra is installed).
    """
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_EVERYTHING], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"the import of every module failed:\n{done.stderr}"
    report = json.loads(done.stdout)
    missing = report.pop("missing")
    assert report == {"records": [], "with_handlers": []}
    assert done.stderr == "", done.stderr
    assert logging.getLogger("effectguard").handlers == []
    if missing:
        needs = ", ".join(
            f"{module} (needs the {extra!r} extra: {name} is not installed)"
            for module, (name, extra) in sorted(missing.items())
        )
        pytest.skip(f"checked every module but those of extras not installed: {needs}")


def _asserts(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [
        f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Assert)
    ]


def test_no_assert_statement_guards_an_invariant_in_the_library():
    """Asserts vanish under ``python -O``: library code raises InternalError instead."""
    found = [where for path in sorted(PACKAGE.rglob("*.py")) for where in _asserts(path)]
    assert found == []


def test_an_internal_error_says_it_is_a_bug_to_report():
    """InternalError names the broken invariant and asks for a report."""
    error = effectguard.errors.InternalError("a probe step without a probe")
    assert isinstance(error, effectguard.EffectGuardError)
    assert str(error).startswith("a probe step without a probe: this is a bug in effectguard")
    assert "report" in str(error)
