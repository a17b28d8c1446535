"""Lint honesty: every suppression says why, and complexity is checked outside named tables."""

from __future__ import annotations

import re
import tokenize
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOQA = re.compile(r"#\s*noqa\b(?P<rest>.*)$", re.IGNORECASE)
EXPLAINED = re.compile(r"^: [A-Z]+[0-9]+(, [A-Z]+[0-9]+)* - \S")
COMPLEXITY = {"C901", "PLR0911", "PLR0912", "PLR0915"}


def _bare_noqas(paths: list[Path]) -> list[str]:
    """Comments (not strings) holding a noqa without its codes and a reason."""
    found = []
    for path in paths:
        with path.open("rb") as source:
            for token in tokenize.tokenize(source.readline):
                if token.type != tokenize.COMMENT:
                    continue
                match = NOQA.search(token.string)
                if match and not EXPLAINED.match(match["rest"]):
                    found.append(f"{path.name}:{token.start[0]}: {token.string}")
    return found


def test_every_noqa_names_its_codes_and_its_reason():
    """Each ``# noqa`` in the package, tests and recipes reads ``# noqa: CODE - reason``."""
    paths = [
        path
        for folder in ("effectguard", "tests", "recipes")
        for path in (ROOT / folder).rglob("*.py")
    ]
    assert _bare_noqas(paths) == []


def test_the_scan_finds_a_bare_noqa(tmp_path: Path):
    """The scan can fail: a blanket noqa, or one with a code but no reason, is reported."""
    sample = tmp_path / "sample.py"
    sample.write_text("a = 1  # noqa\nb = 2  # noqa: E501\nc = 3  # noqa: E501 - long\n")
    assert [line.split(": ", 1)[0] for line in _bare_noqas([sample])] == [
        "sample.py:1",
        "sample.py:2",
    ]


def test_complexity_rules_are_on_except_for_named_files():
    """C901 and PLR0911/0912/0915 are not ignored globally; only per file, each with its reason."""
    lint = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["ruff"][
        "lint"
    ]
    assert COMPLEXITY.isdisjoint(lint["ignore"])
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    for pattern, codes in lint["per-file-ignores"].items():
        if COMPLEXITY & set(codes):
            line = next(line for line in text.splitlines() if line.startswith(f'"{pattern}"'))
            assert re.search(r"\]\s+#\s*\S", line), f"{pattern}: say why its complexity is allowed"
