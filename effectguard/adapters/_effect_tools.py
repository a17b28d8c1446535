"""A framework function standing in for an ``@effect`` tool: keyword-only, typed, described.

The OpenAI Agents SDK and MCP build a tool's schema by introspecting a Python
function, and the Agents SDK passes positional-or-keyword parameters
positionally. Both adapters hand them a function made here instead of the
``@effect`` tool: its parameters are the tool's public ones
(:func:`~effectguard.adapters._common.public_signature`), all keyword-only,
each annotated ``Annotated[T, Field(description=...)]`` from the docstring's
``Args:``, so the schema holds exactly the business parameters, described.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Annotated, Any

from effectguard.adapters._common import PublicSignature

__all__ = ["as_text", "keyword_parameters", "stand_in"]


def keyword_parameters(
    public: PublicSignature, field: Callable[..., Any]
) -> list[inspect.Parameter]:
    """The public parameters, keyword-only, annotated with their hints and descriptions.

    ``field`` is pydantic's ``Field``, passed in so this module imports no
    framework dependency.
    """
    made = []
    for parameter in public.signature.parameters.values():
        hint = public.hints.get(parameter.name, Any)
        if parameter.name in public.descriptions:
            hint = Annotated[hint, field(description=public.descriptions[parameter.name])]
        made.append(parameter.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=hint))
    return made


def stand_in(
    function: Callable[..., Any],
    public: PublicSignature,
    parameters: list[inspect.Parameter],
    returns: Any,
) -> Callable[..., Any]:
    """Give ``function`` (which takes ``**arguments``) the signature and name a framework reads."""
    function.__signature__ = inspect.Signature(parameters, return_annotation=returns)  # type: ignore[attr-defined]
    annotations = {p.name: p.annotation for p in parameters}
    if returns is not inspect.Signature.empty:
        annotations["return"] = returns
    function.__annotations__ = annotations
    function.__name__ = function.__qualname__ = public.name
    function.__doc__ = public.description
    return function


def as_text(output: Any) -> str:
    """A confirmed output as a model reads it: JSON when it is JSON, else ``str()``."""
    if isinstance(output, str):
        return output
    try:
        return json.dumps(output, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return str(output)
