"""docs/architecture.md maps every module, and imports point the way it says.

Imports are read from the source (every ``import`` statement, at any depth,
including those under ``TYPE_CHECKING``), so a forbidden dependency fails here
even if it is only loaded lazily.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "effectguard"
MAP = ROOT / "docs" / "architecture.md"

CORE_MODULES = ("errors", "model", "contract", "codec", "config", "fingerprint")
CORE = ("decorator", "executor", "ledger", *CORE_MODULES)
BUILT_ON_THE_CORE = ("runtime", "cli", "console", "testkit", "bench", "adapters")

#: Agent frameworks: only their adapter (effectguard/adapters/) may import one.
FRAMEWORKS = ("langgraph", "langchain_core", "pydantic_ai", "agents", "mcp")


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


def _imports(name: str, path: Path) -> set[str]:
    """Every effectguard module ``name`` imports, and every name it imports from one."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {item for item in found if item.split(".")[0] == "effectguard"}


def _within(module: str, areas: tuple[str, ...]) -> bool:
    return any(
        module == f"effectguard.{area}" or module.startswith(f"effectguard.{area}.")
        for area in areas
    )


def _offences(
    importers: tuple[str, ...], forbidden: tuple[str, ...], modules: dict[str, Path] = MODULES
) -> dict[str, list[str]]:
    """Modules of ``importers`` that import anything in ``forbidden``, and what they import."""
    offences = {}
    for name, path in modules.items():
        if _within(name, importers):
            bad = sorted(item for item in _imports(name, path) if _within(item, forbidden))
            if bad:
                offences[name] = bad
    return offences


def test_every_module_is_on_the_map_and_the_map_names_no_other():
    """Each module under effectguard/ has its line in docs/architecture.md, and no line is stale."""
    text = MAP.read_text(encoding="utf-8")
    mapped = set(re.findall(r"^\| `([\w/]+\.py)` \|", text, re.MULTILINE))
    files = {path.relative_to(PACKAGE).as_posix() for path in MODULES.values()}
    assert sorted(files - mapped) == [], "modules missing from docs/architecture.md"
    assert sorted(mapped - files) == [], "docs/architecture.md maps modules that do not exist"


def test_the_core_imports_nothing_built_on_it():
    """The decorator, executor, ledger and core modules import no runtime, CLI, testkit or bench."""
    assert _offences(CORE, BUILT_ON_THE_CORE) == {}


def test_the_core_never_imports_telemetry_but_from_configure():
    """OpenTelemetry stays out of the core: only config.py names otel/, and only in a function."""
    assert _offences(CORE, ("otel",)) == {
        "effectguard.config": ["effectguard.otel", "effectguard.otel.instrument"]
    }
    tree = ast.parse(MODULES["effectguard.config"].read_text(encoding="utf-8"))
    top_level = {
        node.module for node in tree.body if isinstance(node, ast.ImportFrom) and node.module
    }
    assert "effectguard.otel" not in top_level


def test_the_executor_sees_the_ledger_only_through_its_protocol():
    """The executor imports no decorator, no config and no ledger backend."""
    forbidden = ("decorator", "config", "ledger.sqlite", "ledger.postgres")
    assert _offences(("executor",), forbidden) == {}


def test_ledgers_import_no_executor_decorator_or_contract():
    """Ledger backends use model, errors and fingerprint only: the rules stay in the core."""
    assert _offences(("ledger",), ("executor", "decorator", "config", "contract", "codec")) == {}


def test_the_bottom_layer_imports_nothing_above_it():
    """model, errors and fingerprint import only each other."""
    above = ("decorator", "executor", "ledger", "contract", "codec", "config", *BUILT_ON_THE_CORE)
    assert _offences(("model", "errors", "fingerprint"), above) == {}


def test_adapters_use_the_public_api_and_the_core_only():
    """An adapter imports no runtime, CLI, testkit or bench: it is built on the core alone."""
    assert _offences(("adapters",), ("runtime", "cli", "testkit", "bench")) == {}


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


def test_the_import_reader_sees_relative_and_function_level_imports(tmp_path: Path):
    """The checks can fail: imports inside a function, absolute or relative, are found."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "def f():\n"
        "    from effectguard.runtime import AgentRuntime\n"
        "    from ..testkit import clock\n",
        encoding="utf-8",
    )
    found = _offences(("executor",), BUILT_ON_THE_CORE, {"effectguard.executor.probe": probe})
    assert found == {
        "effectguard.executor.probe": [
            "effectguard.runtime",
            "effectguard.runtime.AgentRuntime",
            "effectguard.testkit",
            "effectguard.testkit.clock",
        ]
    }
