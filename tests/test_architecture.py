"""The architecture is a checked contract, and docs/architecture.md maps every module.

The layers, the independence of the adapters and the absence of import cycles
are import-linter contracts in ``pyproject.toml`` (``[tool.importlinter]``);
this file runs them, so the README's test command checks them too, and keeps
the two checks import-linter cannot make: that the map is complete, and that
no module but an adapter names an agent framework, even in a function.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "effectguard"
MAP = ROOT / "docs" / "architecture.md"

#: Agent frameworks and engines: only their adapter (effectguard/adapters/) may import one.
FRAMEWORKS = (
    "langgraph",
    "langchain_core",
    "pydantic_ai",
    "agents",
    "mcp",
    "celery",
    "temporalio",
    "dbos",
    "google",
    "llama_index",
    "workflows",
    "crewai",
)


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _lint_imports(config: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("importlinter", reason="import-linter is in the dev extra")
    script = "import sys; from importlinter.cli import lint_imports_command as c; c()"
    return subprocess.run(
        [sys.executable, "-c", script, "--config", str(config), "--no-cache"],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        check=False,
    )


def test_the_import_contracts_in_pyproject_are_kept():
    """Layers, adapter independence, no framework in the core, no cycles: all kept."""
    done = _lint_imports(ROOT / "pyproject.toml", ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_the_contracts_fail_on_a_cycle_and_on_an_upward_import(tmp_path: Path):
    """The same kinds of contract, on a two-module package that breaks both, are broken."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "low.py").write_text("from pkg import high\n", encoding="utf-8")
    (package / "high.py").write_text("from pkg import low\n", encoding="utf-8")
    config = tmp_path / "contracts.toml"
    config.write_text(
        textwrap.dedent(
            """
            [tool.importlinter]
            root_package = "pkg"
            [[tool.importlinter.contracts]]
            name = "layers"
            type = "layers"
            containers = ["pkg"]
            layers = ["high", "low"]
            [[tool.importlinter.contracts]]
            name = "cycles"
            type = "acyclic_siblings"
            ancestors = ["pkg"]
            """
        ),
        encoding="utf-8",
    )
    done = _lint_imports(config, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "2 broken" in done.stdout


def test_every_module_is_on_the_map_and_the_map_names_no_other():
    """Each module under effectguard/ has its line in docs/architecture.md, and no line is stale."""
    text = MAP.read_text(encoding="utf-8")
    mapped = set(re.findall(r"^\| `([\w/]+\.py)` \|", text, re.MULTILINE))
    files = {path.relative_to(PACKAGE).as_posix() for path in MODULES.values()}
    assert sorted(files - mapped) == [], "modules missing from docs/architecture.md"
    assert sorted(mapped - files) == [], "docs/architecture.md maps modules that do not exist"


def _framework_imports(path: Path) -> list[str]:
    """The top-level names of the agent frameworks ``path`` imports, at any depth."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return sorted(found.intersection(FRAMEWORKS))


def test_only_an_adapter_module_imports_a_framework():
    """The core, runtime, CLIs and the adapters' shared module never import an agent framework."""
    offences = {
        name: _framework_imports(path)
        for name, path in MODULES.items()
        if not (name.startswith("effectguard.adapters.") and name != "effectguard.adapters._common")
        and _framework_imports(path)
    }
    assert offences == {}


def test_the_framework_reader_sees_imports_inside_functions(tmp_path: Path):
    """The framework check can fail: an import inside a function is found."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    import langgraph.graph\n    from mcp import types\n")
    assert _framework_imports(probe) == ["langgraph", "mcp"]
