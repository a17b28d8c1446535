"""An offline LLM for LlamaIndex agents: LlamaIndex's MockFunctionCallingLLM playing scripted turns.

Each turn is a list of tool calls (``(name, arguments, call_id)``) or a text
answer; ``seen`` holds the tool results each model call was sent, by call id.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from llama_index.core import set_global_tokenizer
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock, ToolCallBlock
from llama_index.core.llms import MockFunctionCallingLLM
from workflows import Context
from workflows.context.serializers import JsonPickleSerializer

from effectguard.adapters.llama_index import EffectPaused, as_function_tool

# LlamaIndex's chat memory counts tokens with tiktoken, whose encoding it fetches from the
# network unless a cache has it (restoring a pickled memory asks for it again): these tests
# count words instead, so nothing is ever downloaded.
set_global_tokenizer(str.split)

Turn = str | Sequence[tuple[str, dict[str, Any], str]]


class Script:
    """The turns the model plays, in order, and what it was sent."""

    def __init__(self, turns: Sequence[Turn]) -> None:
        self.turns = list(turns)
        self.seen: list[dict[str, str]] = []

    def __call__(self, messages: Sequence[ChatMessage], **_: Any) -> ChatMessage:
        """Answer one model call with the next turn; record the tool results sent."""
        self.seen.append(
            {
                str(m.additional_kwargs.get("tool_call_id")): str(m.content)
                for m in messages
                if m.role == MessageRole.TOOL
            }
        )
        if not self.turns:
            msg = "the model was called more often than scripted"
            raise AssertionError(msg)
        turn = self.turns.pop(0)
        if isinstance(turn, str):
            return ChatMessage(role=MessageRole.ASSISTANT, blocks=[TextBlock(text=turn)])
        blocks = [
            ToolCallBlock(tool_call_id=call_id, tool_name=name, tool_kwargs=arguments)
            for name, arguments, call_id in turn
        ]
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=blocks)

    def results(self) -> dict[str, str]:
        """Every tool result the model was sent, by tool call id."""
        found: dict[str, str] = {}
        for sent in self.seen:
            found.update(sent)
        return found


def shop_agent(script: Script, *tools: Any) -> FunctionAgent:
    """A FunctionAgent over the scripted LLM offering the ``@effect`` tools."""
    return FunctionAgent(
        name="shop",
        description="Takes payments.",
        llm=MockFunctionCallingLLM(response_generator=script),
        tools=[as_function_tool(t) for t in tools],
        system_prompt="You take payments.",
    )


async def until_paused(handler: Any, count: int) -> list[EffectPaused]:
    """Read the run's stream until ``count`` pauses arrive; the pauses, in order."""
    paused: list[EffectPaused] = []
    async for event in handler.stream_events():
        if isinstance(event, EffectPaused):
            paused.append(event)
            if len(paused) == count:
                break
    return paused


async def keep(handler: Any) -> str:
    """The paused run's Context as JSON text (memory included), after stopping the run."""
    data = handler.ctx.to_dict(serializer=JsonPickleSerializer())
    await handler.cancel_run()
    return json.dumps(data)


def restore(agent: FunctionAgent, text: str) -> Context:
    """A Context from :func:`keep`'s text, for ``agent.run(ctx=...)``."""
    return Context.from_dict(agent, json.loads(text), serializer=JsonPickleSerializer())
