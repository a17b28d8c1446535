"""Every Python code block in README.md and docs/ runs, so the documentation cannot rot."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from extras_support import import_extra

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)

# Blocks of one document run in order, in one namespace and one fresh process, in an
# empty directory: later blocks may use what earlier ones defined.
RUNNER = """
import sys
namespace = {"__name__": "__main__"}
for index, source in enumerate(sys.argv[1:], start=1):
    exec(compile(source, f"<block {index}>", "exec"), namespace)
"""


def _documents_with_code() -> list[Path]:
    return [path for path in DOCUMENTS if BLOCK.search(path.read_text(encoding="utf-8"))]


#: Documents whose examples need a PostgreSQL ledger: they read its URL from the
#: environment, as a deployment would, and get a fresh schema of the test server.
NEEDS_POSTGRES = {"postgres.md"}
#: Documents whose examples need an optional extra: (a module it brings, the extra).
#: Documents whose examples import an optional extra, as (module, extra) pairs: without it
#: the document's test skips on a user's machine, and fails in CI (``import_extra``).
NEEDS_EXTRAS = {
    "adapters.md": [
        ("pydantic_ai", "pydantic-ai"),
        ("langgraph", "langgraph"),
        ("agents", "openai-agents"),
        ("mcp", "mcp"),
        ("google.adk", "google-adk"),
        ("llama_index.core", "llama-index"),
        ("crewai", "crewai"),
    ],
    "telemetry.md": [("opentelemetry.sdk.trace", "otel")],
    "engines.md": [("celery", "celery"), ("temporalio", "temporal"), ("dbos", "dbos")],
}


@pytest.mark.parametrize("document", _documents_with_code(), ids=lambda p: p.name)
def test_python_blocks_run(document: Path, tmp_path: Path, request: pytest.FixtureRequest):
    """The document's Python blocks execute without error, in order."""
    for module, extra in NEEDS_EXTRAS.get(document.name, []):
        import_extra(module, extra)
    blocks = BLOCK.findall(document.read_text(encoding="utf-8"))
    env = dict(os.environ)
    # The bench and the proofs are read from a checkout (they are not in the wheel).
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if document.name in NEEDS_POSTGRES:
        env["EFFECTGUARD_LEDGER_URL"] = request.getfixturevalue("postgres_target")
    completed = subprocess.run(
        [sys.executable, "-c", RUNNER, *blocks],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]


def test_the_readme_example_runs_again_and_sends_nothing_new(tmp_path: Path):
    """Run twice in one directory: the second run replays, the provider still holds one capture.

    Logged through Python's last-resort handler, a warning would reach stderr:
    the happy path warns nobody, on either run.
    """
    example = BLOCK.findall((ROOT / "README.md").read_text(encoding="utf-8"))[0]
    runs = [
        subprocess.run(
            [sys.executable, "-c", example],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        for _ in range(2)
    ]
    for done in runs:
        assert done.returncode == 0, done.stderr[-4000:]
        assert done.stderr == ""
    assert runs[0].stdout == runs[1].stdout == "captured cap_000001; the provider holds 1 capture\n"


def test_readme_and_every_document_are_covered():
    """The README has code, and the check found it (guards against a broken pattern)."""
    assert ROOT / "README.md" in _documents_with_code()


#: Modules a user may import: the README's, docs' and recipes' code uses no others.
PUBLIC_MODULES = {
    "effectguard",
    "effectguard.adapters",
    "effectguard.adapters.celery",
    "effectguard.adapters.dbos",
    "effectguard.adapters.google_adk",
    "effectguard.adapters.crewai",
    "effectguard.adapters.langgraph",
    "effectguard.adapters.llama_index",
    "effectguard.adapters.mcp",
    "effectguard.adapters.mcp_proxy",
    "effectguard.adapters.openai_agents",
    "effectguard.adapters.pydantic_ai",
    "effectguard.adapters.temporal",
    "benchmarks",
    "effectguard.errors",
    "effectguard.ledger",
    "effectguard.ledger.postgres",
    "effectguard.ledger.sqlite",
    "effectguard.operator",
    "effectguard.otel",
    "effectguard.runtime",
    "effectguard.testkit",
    # The testkit's documented submodules (see its package docstring).
    "proofs.matrix",
    "effectguard.testkit.pytest_plugin",
    "effectguard.testkit.scenarios",
    "proofs.study",
    "effectguard.testkit.servers.smtp",
}


def _user_code() -> list[tuple[str, str]]:
    """Every piece of code a reader copies: README and docs blocks, and the recipes."""
    code = [
        (f"{path.name} block {index}", block)
        for path in DOCUMENTS
        for index, block in enumerate(BLOCK.findall(path.read_text(encoding="utf-8")), start=1)
    ]
    code += [(path.name, path.read_text(encoding="utf-8")) for path in ROOT.glob("recipes/*.py")]
    return code


def _imported_modules(source: str) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules.add(node.module)
    return {name for name in modules if name.split(".")[0] == "effectguard"}


def test_documentation_and_recipes_import_only_public_modules():
    """README, docs and recipes import effectguard only from its public modules."""
    private = {
        where: sorted(_imported_modules(source) - PUBLIC_MODULES) for where, source in _user_code()
    }
    assert {where: names for where, names in private.items() if names} == {}
