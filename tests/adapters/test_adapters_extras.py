"""An adapter imported without its extra says which extra to install; the package needs none."""

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


@pytest.mark.parametrize("missing", ["langgraph", "langchain_core"])
def test_the_langgraph_adapter_without_its_extra_names_the_extra(missing):
    """ImportError naming effectguard[langgraph], whichever of its packages is missing."""
    done = _import("effectguard.adapters.langgraph", (missing,))
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "ImportError: effectguard.adapters.langgraph needs the 'langgraph' extra"
    )
    assert "pip install 'effectguard[langgraph]'" in last


def test_the_celery_adapter_without_its_extra_names_the_extra():
    """ImportError naming effectguard[celery] when celery is missing."""
    done = _import("effectguard.adapters.celery", ("celery",))
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: effectguard.adapters.celery needs the 'celery' extra")
    assert "pip install 'effectguard[celery]'" in last


def test_the_google_adk_adapter_without_its_extra_names_the_extra():
    """ImportError naming effectguard[google-adk] when google.adk is missing."""
    done = _import("effectguard.adapters.google_adk", ("google.adk",))
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "ImportError: effectguard.adapters.google_adk needs the 'google-adk' extra"
    )
    assert "pip install 'effectguard[google-adk]'" in last


def test_the_temporal_adapter_without_its_extra_names_the_extra():
    """ImportError naming effectguard[temporal] when temporalio is missing."""
    done = _import("effectguard.adapters.temporal", ("temporalio",))
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: effectguard.adapters.temporal needs the 'temporal' extra")
    assert "pip install 'effectguard[temporal]'" in last


def test_the_dbos_adapter_without_its_extra_names_the_extra():
    """ImportError naming effectguard[dbos] when dbos is missing."""
    done = _import("effectguard.adapters.dbos", ("dbos",))
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: effectguard.adapters.dbos needs the 'dbos' extra")
    assert "pip install 'effectguard[dbos]'" in last


@pytest.mark.parametrize("missing", ["llama_index", "workflows"])
def test_the_llama_index_adapter_without_its_extra_names_the_extra(missing):
    """ImportError naming effectguard[llama-index], whichever of its packages is missing."""
    done = _import("effectguard.adapters.llama_index", (missing,))
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "ImportError: effectguard.adapters.llama_index needs the 'llama-index' extra"
    )
    assert "pip install 'effectguard[llama-index]'" in last


def test_the_crewai_adapter_without_its_extra_names_the_extra():
    """ImportError naming effectguard[crewai] when crewai is missing."""
    done = _import("effectguard.adapters.crewai", ("crewai",))
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: effectguard.adapters.crewai needs the 'crewai' extra")
    assert "pip install 'effectguard[crewai]'" in last


def test_the_adapters_package_imports_no_framework():
    """effectguard.adapters (the shared part) imports with every framework hidden."""
    hidden = (
        "langgraph",
        "langchain_core",
        "pydantic_ai",
        "celery",
        "google",
        "temporalio",
        "dbos",
        "llama_index",
        "workflows",
        "crewai",
    )
    done = _import("effectguard.adapters", hidden)
    assert done.returncode == 0, done.stderr
