"""Tool descriptions: what a model is offered for a tool, for the runtime and every adapter.

A Google-style docstring read as a description and per-parameter texts, and
the public signature (without ``idempotency_key``) with its resolved hints.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from effectguard._decorator import get_contract
from effectguard.errors import ConfigurationError

__all__ = ["PublicSignature", "parse_docstring", "public_signature", "require_effect"]


# ---- Google-style docstrings read as descriptions ----

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


# ---- What a model is offered: the public signature, hints, descriptions ----

_KEY_PARAMETER = "idempotency_key"


def require_effect(fn: object, adapter: str) -> str:
    """Return the contract name of the ``@effect`` tool ``fn``; refuse anything else.

    Raises :class:`ConfigurationError` naming ``adapter``: a plain function
    offered as an effect would run unguarded.
    """
    contract = get_contract(fn)
    if contract is None:
        msg = (
            f"{adapter} takes a function decorated with @effect, not {fn!r}: decorate it "
            "(effectguard.effect) so its side effect is recorded before it is sent"
        )
        raise ConfigurationError(msg)
    return contract.name


@dataclass(frozen=True, slots=True)
class PublicSignature:
    """A tool as a model sees it: name, description and the business parameters only.

    ``signature`` never holds ``idempotency_key`` (the executor supplies it)
    nor ``self``/``cls``; ``hints`` are its parameters' resolved type hints
    (``Annotated`` kept); ``descriptions`` come from the docstring's ``Args:``.
    """

    name: str
    description: str
    signature: inspect.Signature
    hints: Mapping[str, Any]
    descriptions: Mapping[str, str]

    @property
    def parameters(self) -> tuple[str, ...]:
        """The parameter names, in order."""
        return tuple(self.signature.parameters)


def public_signature(fn: Any, *, name: str | None = None) -> PublicSignature:
    """Return what a framework should offer a model for the ``@effect`` tool ``fn``.

    ``name`` defaults to the function's ``__name__``. Raises
    :class:`ConfigurationError` when ``fn`` is not an ``@effect`` tool or its
    type hints cannot be resolved (a framework needs them for the schema).
    """
    require_effect(fn, "public_signature()")
    tool = name or getattr(fn, "__name__", None) or "tool"
    signature = inspect.signature(fn)
    parameters = [p for p in signature.parameters.values() if p.name != _KEY_PARAMETER]
    signature = signature.replace(parameters=parameters, return_annotation=signature.empty)
    target = inspect.unwrap(fn)
    try:
        hints = typing.get_type_hints(target, include_extras=True)
    except Exception as exc:
        msg = (
            f"{tool}: cannot resolve its type hints ({exc}); a framework builds the tool's "
            "schema from them: import the names the annotations use at module level"
        )
        raise ConfigurationError(msg) from exc
    description, documented = parse_docstring(inspect.getdoc(target))
    return PublicSignature(
        name=tool,
        description=description or tool,
        signature=signature,
        hints={n: hints.get(n, Any) for n in signature.parameters},
        descriptions={n: documented[n] for n in signature.parameters if n in documented},
    )
