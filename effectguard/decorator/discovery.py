"""Finding decorated tools by contract name: in named modules, in given objects, in this process.

An operator's command that must run a probe or check an output against a
tool's return annotation needs the tool, which lives in the user's code:
:func:`load_tools` imports modules (``--tools MODULE[,MODULE]`` or the
``EFFECTGUARD_TOOLS`` variable) and indexes their decorated tools by contract
name and version, as the runtime's discovery finds them. Every tool decorated
in this process is also remembered (weakly) so a recovery sweep started by
``configure(recover_on_start=True)`` can find the probes without being told.
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import os
import types
import weakref
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from effectguard.errors import ConfigurationError

if TYPE_CHECKING:
    from effectguard.contract import EffectContract
    from effectguard.decorator.tool import Tool

__all__ = ["TOOLS_VARIABLE", "FoundTool", "ToolIndex", "known_tools", "load_tools", "remember"]

#: The environment variable naming the tool modules when ``--tools`` is not given.
TOOLS_VARIABLE = "EFFECTGUARD_TOOLS"

# By order of decoration, so that of two tools of one contract the later one wins.
_REMEMBERED: weakref.WeakValueDictionary[int, Tool] = weakref.WeakValueDictionary()
_SEQUENCE = itertools.count()


@dataclass(frozen=True, slots=True)
class FoundTool:
    """A decorated tool's contract and its declared return type (``Any`` when it declares none)."""

    contract: EffectContract
    returns: Any
    where: str


class ToolIndex:
    """Decorated tools by contract name and version; the latest-decorated wins a tie."""

    def __init__(self, tools: Iterable[FoundTool] = ()) -> None:
        self._by_key: dict[tuple[str, int], FoundTool] = {}
        for tool in tools:
            self._by_key[(tool.contract.name, tool.contract.version)] = tool

    def __repr__(self) -> str:
        return f"ToolIndex({sorted(name for name, _ in self._by_key)})"

    def __len__(self) -> int:
        return len(self._by_key)

    def __iter__(self) -> Iterator[FoundTool]:
        return iter(self._by_key.values())

    def find(self, contract: str, version: int | None = None) -> FoundTool | None:
        """Return the tool of ``contract`` (at ``version``, if given), or None."""
        if version is not None:
            return self._by_key.get((contract, version))
        found = [tool for (name, _), tool in self._by_key.items() if name == contract]
        return max(found, key=lambda tool: tool.contract.version) if found else None

    def merged(self, other: ToolIndex) -> ToolIndex:
        """Return an index of both, ``other`` winning where they name the same contract."""
        return ToolIndex([*self, *other])


def remember(tool: Tool) -> None:
    """Note a tool decorated in this process (weakly: a discarded tool is forgotten)."""
    _REMEMBERED[next(_SEQUENCE)] = tool


def known_tools() -> ToolIndex:
    """Return every decorated tool of this process that is still alive."""
    tools = sorted(_REMEMBERED.items())
    return ToolIndex(_found(tool) for _, tool in tools)


def load_tools(modules: str | Sequence[object] | None = None) -> ToolIndex:
    """Index the decorated tools of ``modules``.

    ``modules`` is a comma-separated string of importable module names, a
    sequence of names, modules, classes, objects or decorated tools, or None
    for the :data:`TOOLS_VARIABLE` environment variable. Raises
    :class:`~effectguard.errors.ConfigurationError` naming a module that cannot
    be imported or that holds no decorated tool.
    """
    if modules is None:
        modules = os.environ.get(TOOLS_VARIABLE, "")
    sources: Sequence[object] = (
        [name.strip() for name in modules.split(",") if name.strip()]
        if isinstance(modules, str)
        else modules
    )
    found: list[FoundTool] = []
    for source in sources:
        resolved = _resolve(source)
        # Tools found on an object are its methods: their probes are bound to it, as a call's are.
        bound = not isinstance(resolved, types.ModuleType) and not inspect.isclass(resolved)
        tools = [_found(tool, resolved if bound else None) for tool in _tools_in(resolved)]
        if not tools:
            msg = f"{_label(source)} holds no @effect tool: name the module that defines them"
            raise ConfigurationError(msg)
        found.extend(tools)
    return ToolIndex(found)


def _label(source: object) -> str:
    if isinstance(source, str):
        return f"module {source!r}"
    return repr(source)


def _resolve(source: object) -> object:
    if not isinstance(source, str):
        return source
    try:
        return importlib.import_module(source)
    except Exception as exc:
        msg = f"cannot import tools module {source!r}: {type(exc).__name__}: {exc}"
        raise ConfigurationError(msg) from exc


def _tools_in(source: object) -> list[Tool]:
    """The decorated tools of a module, class or object, or the tool itself."""
    from effectguard.decorator.decorate import find_tool  # noqa: PLC0415 - decorate imports this module

    tool = find_tool(source)
    if tool is not None:
        return [tool]
    if isinstance(source, types.ModuleType):
        values: Iterable[Any] = vars(source).values()
    else:
        owner = source if inspect.isclass(source) else type(source)
        values = [
            inspect.getattr_static(source, name) for klass in owner.__mro__ for name in vars(klass)
        ]
    found: dict[int, Tool] = {}
    for value in values:
        tool = find_tool(value)
        if tool is not None:
            found[id(tool)] = tool
    return list(found.values())


def _found(tool: Tool, instance: object | None = None) -> FoundTool:
    raw = tool.func
    where = f"{getattr(raw, '__module__', '?')}.{tool.shape.tool}"
    return FoundTool(tool.contract_for(instance), tool.returns, where)
