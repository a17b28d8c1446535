"""A scripted ADK model, the shop agent and a runner helper for the Google ADK adapter's tests.

The model is a ``BaseLlm`` subclass, the shape ADK's own tests use for their
mock model: it plays a fixed list of turns (function calls or text) and keeps
every request, so a test can check what the model was offered and what it
read. Nothing reaches Google: no Gemini model is ever built, and no API key
is read. Test modules check the extra (``import_extra``) before importing this.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService
from google.genai import types

APP = "shop"
USER = "ada"


class ScriptedLlm(BaseLlm):
    """Plays ``turns`` in order, one per model request; then says ``done``."""

    model: str = "scripted"
    turns: list[list[types.Part]] = []  # noqa: RUF012 - a pydantic field, copied per instance
    requests: list[LlmRequest] = []  # noqa: RUF012 - a pydantic field, copied per instance

    async def generate_content_async(
        self,
        llm_request: LlmRequest,
        stream: bool = False,  # noqa: ARG002 - ADK's signature
    ) -> AsyncGenerator[LlmResponse, None]:
        """Answer one model request with the next scripted turn."""
        self.requests.append(llm_request)
        parts = self.turns.pop(0) if self.turns else [types.Part(text="done")]
        yield LlmResponse(content=types.Content(role="model", parts=parts))

    def read(self) -> list[dict[str, Any]]:
        """Every function response the model was sent, in order."""
        return [
            dict(part.function_response.response or {})
            for request in self.requests
            for content in request.contents
            for part in content.parts or ()
            if part.function_response is not None
        ]


def call(name: str, arguments: dict[str, Any], call_id: str) -> types.Part:
    """The model's function call."""
    return types.Part(function_call=types.FunctionCall(name=name, args=arguments, id=call_id))


def say(text: str) -> types.Part:
    """The model's text."""
    return types.Part(text=text)


def shop_runner(model: ScriptedLlm, tools: Sequence[Any], sessions: BaseSessionService) -> Runner:
    """A runner of one agent with ``tools`` over ``sessions``."""
    agent = LlmAgent(name="shop", model=model, instruction="Run the shop.", tools=list(tools))
    return Runner(agent=agent, app_name=APP, session_service=sessions)


async def run(runner: Runner, session_id: str, message: types.Content | str) -> list[Any]:
    """Run one turn of the session; return its events."""
    if isinstance(message, str):
        message = types.Content(role="user", parts=[types.Part(text=message)])
    return [
        event
        async for event in runner.run_async(
            user_id=USER, session_id=session_id, new_message=message
        )
    ]


async def session_of(runner: Runner, session_id: str) -> Any:
    """The session as the session service holds it now."""
    return await runner.session_service.get_session(
        app_name=APP, user_id=USER, session_id=session_id
    )


def confirmation(confirmation_id: str, *, confirmed: bool) -> types.Content:
    """A user message answering one ``adk_request_confirmation`` call, as a host might."""
    response = types.FunctionResponse(
        name="adk_request_confirmation", id=confirmation_id, response={"confirmed": confirmed}
    )
    return types.Content(role="user", parts=[types.Part(function_response=response)])
