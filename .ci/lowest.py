"""Print a pip constraints file pinning every direct requirement to the lowest version allowed.

Reads ``pyproject.toml`` (dependencies and every optional extra) and pins each
requirement that has a ``>=`` lower bound to exactly that bound, so CI can check
that the floors it declares really work together.

``--without A,B`` leaves out the requirements of extras A and B (whose own
dependencies need more than other floors allow: they are tested at their floors
in an environment of their own); ``--only A,B`` pins only theirs.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path


def floors(
    pyproject: Path, without: frozenset[str] = frozenset(), only: frozenset[str] | None = None
) -> dict[str, str]:
    """Each requirement's distribution name and its lowest allowed version."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    requirements = list(project.get("dependencies", [])) if only is None else []
    for name, extra in project.get("optional-dependencies", {}).items():
        if name in without or (only is not None and name not in only):
            continue
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


def _extras(option: str, args: list[str]) -> frozenset[str] | None:
    if option not in args:
        return None
    return frozenset(args[args.index(option) + 1].split(","))


if __name__ == "__main__":
    args = sys.argv[1:]
    root = Path(args[0] if args and not args[0].startswith("--") else ".")
    without = _extras("--without", args) or frozenset()
    pins = sorted(floors(root / "pyproject.toml", without, _extras("--only", args)).items())
    sys.stdout.write("".join(f"{name}=={version}\n" for name, version in pins))
