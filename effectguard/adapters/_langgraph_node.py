"""``EffectToolNode``: a ``ToolNode`` whose sibling tool calls all finish before a pause.

``ToolNode`` runs a turn's tool calls together (a thread pool, or
``asyncio.gather``) and lets the first interrupt escape at once. In the async
node the siblings still in flight are then abandoned, and cancelled when the
loop ends: an email that was never sent ends OUTCOME_UNKNOWN, a needless
ticket for an operator. This node waits for every sibling, then pauses on all
of their interrupts together, so ``pending_effects`` lists each of them.
"""

from __future__ import annotations

import contextvars
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.errors import GraphInterrupt
from langgraph.prebuilt import ToolNode
from langgraph.types import Interrupt

from effectguard._decorator import is_effect
from effectguard.adapters._langgraph_tool import as_tool, require_checkpointer

__all__ = ["EffectToolNode"]


@dataclass
class _Siblings:
    """What the tool calls of one node run raised, kept until all of them are done."""

    interrupts: list[Interrupt] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)

    def settle(self) -> None:
        """Raise the first error, else pause on every interrupt, else return."""
        if self.errors:
            raise self.errors[0]
        if self.interrupts:
            raise GraphInterrupt(tuple(self.interrupts))


# Set for the duration of one node run; the tool calls' threads and tasks copy the context,
# so each sees the same _Siblings.
_running: contextvars.ContextVar[_Siblings | None] = contextvars.ContextVar(
    "effectguard_langgraph_siblings", default=None
)


def _placeholder(call: Any) -> ToolMessage:
    """Stands in for a call that raised; never returned, since the node run raises instead."""
    return ToolMessage(content="", name=call["name"], tool_call_id=call["id"], status="error")


class EffectToolNode(ToolNode):
    """A ``ToolNode`` for effects: siblings finish before a pause, and a checkpointer is required.

    ``tools`` may mix ``@effect`` functions (made tools with
    :func:`~effectguard.adapters.langgraph.as_tool`), LangChain tools and plain
    functions; the other arguments are ``ToolNode``'s. A run of the node
    without a checkpointer raises :class:`~effectguard.ConfigurationError`
    before any tool is called. When some of the turn's tool calls pause, the
    node pauses once every call has finished, on all of their interrupts.
    """

    def __init__(self, tools: Sequence[BaseTool | Any], **kwargs: Any) -> None:
        super().__init__([as_tool(t) if is_effect(t) else t for t in tools], **kwargs)

    def _func(self, input: Any, config: RunnableConfig, runtime: Any) -> Any:  # noqa: A002 - ToolNode's own parameter name
        require_checkpointer(config.get("configurable", {}), f"EffectToolNode {self.name!r}")
        siblings = _Siblings()
        token = _running.set(siblings)
        try:
            result = super()._func(input, config, runtime)
        finally:
            _running.reset(token)
        siblings.settle()
        return result

    async def _afunc(self, input: Any, config: RunnableConfig, runtime: Any) -> Any:  # noqa: A002 - ToolNode's own parameter name
        require_checkpointer(config.get("configurable", {}), f"EffectToolNode {self.name!r}")
        siblings = _Siblings()
        token = _running.set(siblings)
        try:
            result = await super()._afunc(input, config, runtime)
        finally:
            _running.reset(token)
        siblings.settle()
        return result

    def _run_one(self, call: Any, input_type: Any, tool_runtime: Any) -> Any:
        siblings = _running.get()
        try:
            return super()._run_one(call, input_type, tool_runtime)
        except GraphInterrupt as exc:
            if siblings is None:
                raise
            siblings.interrupts.extend(exc.args[0])
        except Exception as exc:
            if siblings is None:
                raise
            siblings.errors.append(exc)
        return _placeholder(call)

    async def _arun_one(self, call: Any, input_type: Any, tool_runtime: Any) -> Any:
        siblings = _running.get()
        try:
            return await super()._arun_one(call, input_type, tool_runtime)
        except GraphInterrupt as exc:
            if siblings is None:
                raise
            siblings.interrupts.extend(exc.args[0])
        except Exception as exc:
            if siblings is None:
                raise
            siblings.errors.append(exc)
        return _placeholder(call)
