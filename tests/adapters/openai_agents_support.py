"""An offline ``Model`` for the OpenAI Agents SDK: scripted turns, recorded inputs."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

from agents import Agent, RunConfig
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from effectguard.adapters.openai_agents import as_function_tool, stop_on_unconfirmed

#: Every run in these tests: no tracing export, nothing leaves the machine.
OFFLINE = RunConfig(tracing_disabled=True)


def tool_call(name: str, arguments: dict[str, Any], call_id: str) -> ResponseFunctionToolCall:
    """One function tool call the model makes."""
    return ResponseFunctionToolCall(
        id=call_id,
        call_id=call_id,
        type="function_call",
        name=name,
        arguments=json.dumps(arguments),
    )


def say(text: str) -> ResponseOutputMessage:
    """The model's final answer."""
    return ResponseOutputMessage(
        id="msg",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(text=text, type="output_text", annotations=[], logprobs=[])],
    )


class ScriptModel(Model):
    """Answers each model call with the next scripted turn; ``inputs`` holds what it was sent."""

    def __init__(self, turns: Sequence[Sequence[Any]]) -> None:
        self.turns = [list(turn) for turn in turns]
        self.inputs: list[Any] = []

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        """Return the next turn; the input (second argument) is recorded."""
        input = args[1] if len(args) > 1 else kwargs["input"]  # noqa: A001 - the SDK's name
        self.inputs.append(input)
        if not self.turns:
            msg = "the model was called more often than scripted"
            raise AssertionError(msg)
        return ModelResponse(output=self.turns.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        """Not scripted: these tests never stream."""
        msg = "these tests do not stream"
        raise NotImplementedError(msg)

    def tool_outputs(self, call: int = -1) -> dict[str, str]:
        """The tool outputs the model was sent in call ``call``, by call id."""
        return {
            item["call_id"]: item["output"]
            for item in self.inputs[call]
            if isinstance(item, dict) and item.get("type") == "function_call_output"
        }


def shop_agent(model: ScriptModel, *tools: Any, stop: bool = True, **options: Any) -> Agent[Any]:
    """An agent offering the ``@effect`` tools, ending its run on an unconfirmed effect."""
    return Agent(
        name="shop",
        model=model,
        tools=[as_function_tool(fn, **options) for fn in tools],
        tool_use_behavior=stop_on_unconfirmed if stop else "run_llm_again",
    )
