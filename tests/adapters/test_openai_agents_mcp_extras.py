"""The OpenAI Agents and MCP adapters imported without their extras name the extra to install."""

from __future__ import annotations

import subprocess
import sys

import pytest

HIDE = "import sys\nfor name in {names!r}:\n    sys.modules[name] = None\n"


def _import(module: str, hidden: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    """Import ``module`` in a fresh interpreter in which ``hidden`` cannot be imported."""
    source = HIDE.format(names=hidden) + f"import {module}\n"
    return subprocess.run(
        [sys.executable, "-c", source], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.parametrize(
    ("module", "missing", "extra"),
    [
        ("effectguard.adapters.openai_agents", "agents", "openai-agents"),
        ("effectguard.adapters.mcp", "mcp", "mcp"),
        ("effectguard.adapters.mcp", "mcp_types", "mcp"),
    ],
)
def test_an_adapter_without_its_extra_names_the_extra(module, missing, extra):
    """ImportError naming effectguard[extra], whichever of its packages is missing."""
    done = _import(module, (missing,))
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"ImportError: {module} needs the {extra!r} extra")
    assert f"pip install 'effectguard[{extra}]'" in last


def test_the_adapters_package_imports_neither_sdk():
    """effectguard.adapters (the shared part) imports with the Agents SDK and MCP hidden."""
    done = _import("effectguard.adapters", ("agents", "mcp", "mcp_types"))
    assert done.returncode == 0, done.stderr
