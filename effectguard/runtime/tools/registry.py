"""The tools a runtime offers, by name: given one by one or discovered on a module or object."""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from effectguard._decorator import is_effect
from effectguard.errors import ConfigurationError
from effectguard.runtime.tools.definition import ToolDefinition

__all__ = ["ToolLike", "ToolRegistry"]

#: What a runtime's ``tools`` may hold.
ToolLike = ToolDefinition | Callable[..., Any]


def _as_definition(tool: ToolLike) -> ToolDefinition:
    if isinstance(tool, ToolDefinition):
        return tool
    if isinstance(tool, (ToolRegistry, types.ModuleType)) or inspect.isclass(tool):
        msg = (
            f"{tool!r} is not a tool; use ToolRegistry.discover(...) to find the "
            "@effect tools of a module, class or object"
        )
        raise ConfigurationError(msg)
    return ToolDefinition.from_function(tool)


class ToolRegistry:
    """Tools by unique name, in the order they were added.

    Accepts ``@effect``-decorated functions and bound methods (their contracts
    attached), plain functions (read-only tools) and :class:`ToolDefinition` objects.
    A second tool with a name already taken is a :class:`ConfigurationError`.
    """

    def __init__(self, tools: Iterable[ToolLike] = ()) -> None:
        self._tools: dict[str, ToolDefinition] = {}
        for tool in tools:
            self.add(tool)

    def __repr__(self) -> str:
        return f"ToolRegistry({', '.join(self._tools)})"

    def add(self, tool: ToolLike) -> ToolDefinition:
        """Add one tool and return its definition."""
        definition = _as_definition(tool)
        if definition.name in self._tools:
            msg = (
                f"two tools are named {definition.name!r}; give one another name with "
                "ToolDefinition.from_function(func, name=...)"
            )
            raise ConfigurationError(msg)
        self._tools[definition.name] = definition
        return definition

    def extend(self, tools: Iterable[ToolLike]) -> None:
        """Add several tools."""
        for tool in tools:
            self.add(tool)

    def get(self, name: str) -> ToolDefinition | None:
        """Return the tool called ``name``, or None."""
        return self._tools.get(name)

    def names(self) -> list[str]:
        """Return the tool names, in order."""
        return list(self._tools)

    def __iter__(self) -> Iterator[ToolDefinition]:
        return iter(list(self._tools.values()))

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    @classmethod
    def discover(cls, *sources: object) -> ToolRegistry:
        """Return a registry of every ``@effect`` tool found on ``sources``.

        A module contributes its decorated functions, in definition order
        (each object once, even if imported under two names). An object
        contributes its decorated methods, bound to it, so a probe written as
        a method runs on the same instance; a class contributes its decorated
        static and class methods (instance methods need an instance). Each
        tool keeps the contract it was decorated with.
        """
        registry = cls()
        for source in sources:
            registry.extend(_found(source))
        return registry


def _found(source: object) -> list[Callable[..., Any]]:
    if isinstance(source, types.ModuleType):
        seen: set[int] = set()
        found = []
        for value in vars(source).values():
            if is_effect(value) and not inspect.isclass(value) and id(value) not in seen:
                seen.add(id(value))
                found.append(value)
        return found
    owner = source if inspect.isclass(source) else type(source)
    names: list[str] = []
    for klass in reversed(owner.__mro__):
        names.extend(n for n in vars(klass) if n not in names)
    found = []
    for name in names:
        raw = inspect.getattr_static(source, name)
        if not is_effect(raw):
            continue
        if inspect.isclass(source) and not isinstance(raw, (staticmethod, classmethod)):
            continue
        found.append(getattr(source, name))
    return found
