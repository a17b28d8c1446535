"""recipes/pydantic_ai_refund.py: pause, confirm, resume; the provider holds one refund."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from extras_support import import_extra

import_extra("pydantic_ai", "pydantic-ai")

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "pydantic_ai_refund.py"


def _recipe():
    spec = importlib.util.spec_from_file_location("recipes_pydantic_ai_refund", RECIPE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_recipe_pauses_resumes_and_refunds_once(tmp_path, capsys):
    """The story runs offline to exit 0, and the provider's own count is one refund."""
    recipe = _recipe()

    assert recipe.main(tmp_path) == 0

    out = capsys.readouterr().out
    assert f"the run paused on {recipe.OPERATION}: QUARANTINED" in out
    assert "still waiting" in out
    assert "the run completed: Refunded:" in out
    api = recipe.RefundAPI(path=tmp_path / "api.db")
    assert api.committed() == 1
    assert api.attempts() == 1
