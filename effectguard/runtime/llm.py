"""What the runtime asks of a model, and a scripted model that needs no API key.

A model is any object with ``next_turn(messages, tools)`` returning a
:class:`ModelTurn` (or an awaitable of one): either tool calls or a final
text. ``messages`` are plain JSON dicts, provider-neutral, so an adapter for
a real model API maps them in a few lines:

- ``{"role": "user", "content": "..."}`` (and any messages given to ``start``);
- ``{"role": "assistant", "content": None, "tool_calls": [{"id", "name", "arguments"}]}``;
- ``{"role": "tool", "tool_call_id": "...", "name": "...", "content": "...",
  "is_error": bool}``, where ``content`` is the tool's output as JSON text (a
  string output as itself) or a JSON ``{"error": {...}}`` object;
- ``{"role": "assistant", "content": "final text"}``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from effectguard.errors import ScriptExhaustedError

if TYPE_CHECKING:
    from effectguard.runtime.tools import ToolDefinition

__all__ = ["Message", "Model", "ModelTurn", "ScriptedModel", "ToolCall"]

#: One message of a run's conversation, as JSON.
Message = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A model's request to run one tool.

    ``id`` is unique within its turn; ``arguments`` is a JSON object, as a
    mapping or as the JSON text a model API returned (malformed text is
    reported back to the model, never raised).
    """

    id: str
    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            msg = f"a tool call id is a non-empty string, not {self.id!r}"
            raise ValueError(msg)
        if not isinstance(self.name, str):
            msg = f"a tool name is a string, not {type(self.name).__name__}"
            raise TypeError(msg)
        if not isinstance(self.arguments, str):
            object.__setattr__(self, "arguments", dict(self.arguments))

    def to_json(self) -> dict[str, Any]:
        """Return the JSON form kept in messages and checkpoints."""
        arguments = self.arguments if isinstance(self.arguments, str) else dict(self.arguments)
        return {"id": self.id, "name": self.name, "arguments": arguments}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ToolCall:
        """Rebuild a call from :meth:`to_json` output."""
        return cls(str(data["id"]), str(data["name"]), data.get("arguments", {}))


@dataclass(frozen=True, slots=True)
class ModelTurn:
    """One answer of a model: tool calls to run, or the final text, never both."""

    tool_calls: Sequence[ToolCall] = ()
    final: str | None = None

    def __post_init__(self) -> None:
        calls = tuple(self.tool_calls)
        object.__setattr__(self, "tool_calls", calls)
        if (not calls) == (self.final is None):
            msg = "a ModelTurn holds either tool_calls or a final text, exactly one of them"
            raise ValueError(msg)
        if self.final is not None and not isinstance(self.final, str):
            msg = f"a final answer is a string, not {type(self.final).__name__}"
            raise TypeError(msg)
        if not all(isinstance(call, ToolCall) for call in calls):
            msg = "tool_calls must be ToolCall objects"
            raise TypeError(msg)
        ids = [call.id for call in calls]
        if len(set(ids)) != len(ids):
            msg = f"tool call ids must be unique within a turn, got {ids}"
            raise ValueError(msg)

    @classmethod
    def call(cls, name: str, call_id: str | None = None, **arguments: Any) -> ModelTurn:
        """A turn calling one tool: ``ModelTurn.call("capture", invoice_id="INV-1")``."""
        return cls(tool_calls=(ToolCall(call_id or f"call-{name}", name, arguments),))

    @classmethod
    def answer(cls, text: str) -> ModelTurn:
        """A turn giving the final text."""
        return cls(final=text)


class Model(Protocol):
    """Anything that chooses the next turn of a run from its conversation so far."""

    def next_turn(
        self, messages: Sequence[Message], tools: Sequence[ToolDefinition]
    ) -> ModelTurn | Awaitable[ModelTurn]:
        """Return tool calls to run, or the final text."""
        ...


ScriptItem = ModelTurn | str | ToolCall | Sequence[ToolCall]


def _turn(item: ScriptItem) -> ModelTurn:
    if isinstance(item, ModelTurn):
        return item
    if isinstance(item, str):
        return ModelTurn(final=item)
    if isinstance(item, ToolCall):
        return ModelTurn(tool_calls=(item,))
    return ModelTurn(tool_calls=tuple(item))


class ScriptedModel:
    """A model that plays a fixed list of turns, so tests and demos need no API key.

    A turn is a :class:`ModelTurn`, a string (the final text), a
    :class:`ToolCall` or a list of them. Which turn comes next is derived from
    the conversation, not from a counter in this object: it is the number of
    assistant messages already in ``messages``. So a run resumed from a
    checkpoint, even in a new process with a new ``ScriptedModel``, continues
    the script exactly where the run stands, and asking twice at the same point
    gives the same turn. Past the end, :class:`ScriptExhaustedError`.
    """

    def __init__(self, turns: Sequence[ScriptItem]) -> None:
        self.turns = tuple(_turn(item) for item in turns)
        #: How many times this object was asked for a turn (in this process).
        self.requests = 0

    def __repr__(self) -> str:
        return f"ScriptedModel({len(self.turns)} turns)"

    def next_turn(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition],  # noqa: ARG002 - a script ignores the tools on offer
    ) -> ModelTurn:
        """Return the turn after the assistant messages already in ``messages``."""
        self.requests += 1
        position = sum(1 for message in messages if message.get("role") == "assistant")
        if position >= len(self.turns):
            msg = (
                f"the script has {len(self.turns)} turns and the run already played "
                f"{position}; add a final turn"
            )
            raise ScriptExhaustedError(msg)
        return self.turns[position]
