"""A tool as the runtime offers it to a model: name, description, JSON schema, handler.

How the runtime calls ``handler`` depends on what it is:

- an ``@effect``-decorated function or bound method: called with the
  arguments as keywords, through its own contract (taken from it with
  :func:`~effectguard.get_contract`), with the runtime's executor lent to it;
- any other callable with ``contract=None``: a read-only tool, called with
  the arguments as keywords (positional-only parameters by position);
- any other callable with a ``contract``: the executor's handler convention,
  ``handler(arguments, *, idempotency_key=...)``, run through
  ``effect_executor.execute(contract, arguments, handler)``.
"""

from __future__ import annotations

import copy
import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from effectguard._contract import EffectContract
from effectguard._decorator import get_contract, is_effect
from effectguard.errors import ConfigurationError
from effectguard.runtime.tools.schema import HIDDEN, describes, function_schema
from effectguard.runtime.tools.validation import check_schema

__all__ = ["ToolDefinition"]

#: The tool names every major model API accepts.
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """One tool the runtime can run: what the model sees, and what runs.

    ``parameters`` is the JSON schema of the arguments object (``"type":
    "object"``) in the subset :mod:`effectguard.runtime.tools.validation` checks;
    it never names ``idempotency_key``, which only the executor supplies.
    ``contract`` is the effect contract, taken from ``handler`` when it is a
    decorated tool (giving a different one is an error); ``None`` means a
    read-only tool.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    handler: Callable[..., Any]
    contract: EffectContract | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            msg = f"tool name {self.name!r} must be 1-64 letters, digits, '_' or '-'"
            raise ConfigurationError(msg)
        if not isinstance(self.description, str):
            msg = f"tool {self.name}: description must be a string"
            raise ConfigurationError(msg)
        if not callable(self.handler):
            msg = f"tool {self.name}: handler must be callable, not {type(self.handler).__name__}"
            raise ConfigurationError(msg)
        parameters = self.parameters
        if not isinstance(parameters, Mapping) or parameters.get("type") != "object":
            msg = f'tool {self.name}: parameters must be a JSON schema with "type": "object"'
            raise ConfigurationError(msg)
        check_schema(parameters, f"tool {self.name} parameters")
        if describes(parameters, HIDDEN):
            msg = (
                f"tool {self.name}: parameters must not include {HIDDEN!r}; the executor "
                "supplies it from the contract, never the model"
            )
            raise ConfigurationError(msg)
        object.__setattr__(self, "parameters", copy.deepcopy(dict(parameters)))
        own = get_contract(self.handler)
        if own is not None:
            if self.contract is not None and self.contract is not own:
                msg = (
                    f"tool {self.name}: the handler is an @effect tool with its own contract; "
                    "do not give another one"
                )
                raise ConfigurationError(msg)
            object.__setattr__(self, "contract", own)
        elif self.contract is not None and not isinstance(self.contract, EffectContract):
            msg = f"tool {self.name}: contract must be an EffectContract or None"
            raise ConfigurationError(msg)

    @property
    def decorated(self) -> bool:
        """True when the handler is an ``@effect`` tool that runs under its own contract."""
        return is_effect(self.handler)

    @property
    def read_only(self) -> bool:
        """True for a tool without an effect contract."""
        return self.contract is None

    def spec(self) -> dict[str, Any]:
        """Return ``{"name", "description", "parameters"}``, as model APIs take a tool."""
        return {
            "name": self.name,
            "description": self.description,
            "parameters": copy.deepcopy(dict(self.parameters)),
        }

    @classmethod
    def from_function(
        cls,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
    ) -> ToolDefinition:
        """Describe a plain or ``@effect`` function (or bound method) as a tool.

        The name defaults to the function's ``__name__``; the description and
        parameters come from its docstring and type hints (see
        :mod:`effectguard.runtime.tools.schema`). A plain function that takes an
        ``idempotency_key`` is refused: only an ``@effect`` tool is given one.
        """
        if not callable(func):
            msg = f"a tool is a function, a decorated tool or a ToolDefinition, not {func!r}"
            raise ConfigurationError(msg)
        tool_name = name or getattr(func, "__name__", None)
        if not isinstance(tool_name, str):
            msg = f"cannot name the tool {func!r}; pass name="
            raise ConfigurationError(msg)
        _refuse_unbound_method(func, tool_name)
        if not is_effect(func):
            _refuse_key(func, tool_name)
        schema = function_schema(func, name=tool_name)
        return cls(
            name=tool_name,
            description=schema.description if description is None else description,
            parameters=schema.parameters,
            handler=func,
        )


def _refuse_unbound_method(func: Callable[..., Any], name: str) -> None:
    try:
        parameters = list(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        return
    if parameters and parameters[0] in ("self", "cls"):
        msg = (
            f"tool {name} takes {parameters[0]!r}: pass the method bound to its object "
            "(obj.method), or use ToolRegistry.discover(obj)"
        )
        raise ConfigurationError(msg)


def _refuse_key(func: Callable[..., Any], name: str) -> None:
    try:
        parameters = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return
    if HIDDEN in parameters:
        # Only the executor may supply the key; a model-chosen (or defaulted) one is no key.
        msg = (
            f"tool {name} takes {HIDDEN} but is not an @effect tool; decorate it "
            "with @effect so the executor supplies a stable key"
        )
        raise ConfigurationError(msg)
