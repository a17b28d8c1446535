"""Print a pip constraints file pinning every direct requirement to the lowest version allowed.

Reads ``pyproject.toml`` (dependencies and every optional extra) and pins each
requirement that has a ``>=`` lower bound to exactly that bound, so CI can check
that the floors it declares really work together.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path


def floors(pyproject: Path) -> dict[str, str]:
    """Each requirement's distribution name and its lowest allowed version."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    requirements = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        requirements.extend(extra)
    found: dict[str, str] = {}
    for requirement in requirements:
        match = re.match(r"\s*([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*([^;]*)", requirement)
        if match is None:
            continue
        name, specifiers = match.group(1).lower(), match.group(3)
        lower = re.search(r">=\s*([0-9][0-9A-Za-z.]*)", specifiers)
        if lower is not None:
            found[name] = lower.group(1)
    return found


if __name__ == "__main__":
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    pins = sorted(floors(root / "pyproject.toml").items())
    sys.stdout.write("".join(f"{name}=={version}\n" for name, version in pins))
