"""Google-style docstrings read as a tool's description and its parameters' descriptions.

Written once for everything that offers a Python function to a model: the
agent runtime's schemas and the framework adapters' (``effectguard.adapters``).
It imports nothing of effectguard.
"""

from __future__ import annotations

import inspect
import re

__all__ = ["parse_docstring"]

_SECTIONS = frozenset(
    {
        "args",
        "arguments",
        "parameters",
        "params",
        "returns",
        "return",
        "yields",
        "raises",
        "examples",
        "example",
        "note",
        "notes",
        "attributes",
        "see also",
        "warnings",
        "warning",
        "todo",
    }
)
_ARG_SECTIONS = frozenset({"args", "arguments", "parameters", "params"})
_HEADER = re.compile(r"^([A-Za-z][A-Za-z ]*):\s*$")
_ARG_LINE = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Return ``(description, {parameter: description})`` from a Google-style docstring.

    The description is the text before the first section header; argument
    descriptions may continue on more-indented lines.
    """
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    arguments: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    base_indent: int | None = None
    for line in lines:
        header = _HEADER.match(line)
        if header and header.group(1).strip().lower() in _SECTIONS:
            section = header.group(1).strip().lower()
            current, base_indent = None, None
            continue
        if section is None:
            summary.append(line)
            continue
        if section not in _ARG_SECTIONS or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if base_indent is None:
            base_indent = indent
        entry = _ARG_LINE.match(line.strip())
        if indent <= base_indent and entry:
            current = entry.group(1)
            arguments[current] = entry.group(2).strip()
        elif current is not None:
            arguments[current] = f"{arguments[current]} {line.strip()}".strip()
    description = "\n".join(summary).strip()
    return description, arguments
