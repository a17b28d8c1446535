"""Optional-extra test plumbing: a test that needs an extra skips without it, or fails in CI.

A user's machine may have any subset of the extras (``langgraph``,
``pydantic-ai``, ``openai-agents``, ``mcp``, ``otel``, ``console``) installed;
their tests skip with a reason naming the extra to install. CI installs every
extra and sets ``EFFECTGUARD_REQUIRE_EXTRAS=1``, which turns any such skip into
a failure, so an adapter, telemetry or console test can never pass by not running.
"""

from __future__ import annotations

import importlib
import os
import re
from types import ModuleType

import pytest

REQUIRE_EXTRAS = "EFFECTGUARD_REQUIRE_EXTRAS"
#: Extras CI leaves out of one environment on purpose (comma-separated), tested in another:
#: their tests skip there even when every other extra is required.
ABSENT_EXTRAS = "EFFECTGUARD_ABSENT_EXTRAS"


def extras_required(extra: str | None = None) -> bool:
    """True when every extra's tests must run (CI): a skip of one is then a failure.

    ``extra`` named in ``EFFECTGUARD_ABSENT_EXTRAS`` is not required.
    """
    if extra is not None and extra in absent_extras():
        return False
    return os.environ.get(REQUIRE_EXTRAS, "").strip() not in ("", "0")


#: How a skip names the extra it needs: ``needs the 'crewai' extra``.
_NEEDS_EXTRA = re.compile(r"needs the '([^']+)' extra")


def absent_extras() -> set[str]:
    """The extras named in ``EFFECTGUARD_ABSENT_EXTRAS``: left out here on purpose."""
    return {name.strip() for name in os.environ.get(ABSENT_EXTRAS, "").split(",")} - {""}


def skip_is_excused(reason: str) -> bool:
    """True when a skip names extras, and every one of them is left out on purpose.

    Such a skip stays a skip even in CI: those extras' tests run in another environment.
    """
    named = set(_NEEDS_EXTRA.findall(reason))
    return bool(named) and named <= absent_extras()


def import_extra(module: str, extra: str) -> ModuleType:
    """Return ``module``; without it skip the calling test module, or fail when extras are required.

    Call it at module level in a test module that needs ``effectguard[extra]``.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        reason = (
            f"needs the {extra!r} extra ({exc.name} is not installed): "
            f"pip install -e '.[dev,{extra}]'"
        )
        if extras_required(extra):
            pytest.fail(f"{reason}, and {REQUIRE_EXTRAS}=1 is set", pytrace=False)
        pytest.skip(reason, allow_module_level=True)
