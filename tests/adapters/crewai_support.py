"""An offline CrewAI crew for the adapter's tests: a scripted LLM, no telemetry, tmp storage.

CrewAI's own tests run crews on a ``BaseLLM`` subclass; this one answers each
call with the next scripted ReAct turn and keeps the messages it was sent, so
a test can see what the model read. The environment is set before CrewAI is
imported: no telemetry (``CREWAI_DISABLE_TELEMETRY``, ``CREWAI_DISABLE_TRACKING``),
no tracing and no first-run tracing prompt (``CREWAI_TRACING_ENABLED=false``,
``CREWAI_TESTING=true``), and CrewAI's storage under a temporary directory
(``XDG_DATA_HOME``, ``CREWAI_STORAGE_DIR``). ``OTEL_SDK_DISABLED`` is not set:
it would switch off the telemetry tests' own OpenTelemetry SDK in the same run.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from typing import Any

OFFLINE_ENVIRONMENT = {
    "CREWAI_DISABLE_TELEMETRY": "true",
    "CREWAI_DISABLE_TRACKING": "true",
    "CREWAI_TRACING_ENABLED": "false",
    "CREWAI_TESTING": "true",
    "CREWAI_STORAGE_DIR": "effectguard-tests",
}
os.environ.update(OFFLINE_ENVIRONMENT)
os.environ.setdefault("XDG_DATA_HOME", tempfile.mkdtemp(prefix="effectguard-crewai-"))

from crewai import Agent, Crew, Task  # noqa: E402 - after the environment is set
from crewai.llms.base_llm import BaseLLM  # noqa: E402 - after the environment is set

from effectguard.adapters.crewai import as_crewai_tool, stop_on_unconfirmed  # noqa: E402 - after the environment is set


def action(tool: str, arguments: dict[str, Any]) -> str:
    """A model turn calling ``tool`` with ``arguments``, in CrewAI's ReAct format."""
    return f"Thought: I will use {tool}.\nAction: {tool}\nAction Input: {json.dumps(arguments)}"


def final(text: str) -> str:
    """A model turn giving the final answer."""
    return f"Thought: I now know the final answer\nFinal Answer: {text}"


class ScriptLLM(BaseLLM):
    """Answers each call with the next scripted turn; ``sent`` holds the messages of each call."""

    def __init__(self, turns: Sequence[str]) -> None:
        super().__init__(model="scripted")
        self.turns = list(turns)
        self.sent: list[list[dict[str, Any]]] = []

    def call(self, messages: Any, *args: Any, **kwargs: Any) -> str:  # noqa: ARG002 - CrewAI's signature
        """Return the next turn; a call beyond the script fails the test."""
        self.sent.append([dict(m) for m in messages])
        if not self.turns:
            msg = "the model was called more often than scripted"
            raise AssertionError(msg)
        return self.turns.pop(0)

    def supports_function_calling(self) -> bool:
        """Tools are called through ReAct text, as CrewAI does for such models."""
        return False

    def get_context_window_size(self) -> int:
        """Large enough for every scripted conversation."""
        return 32_000

    def observations(self) -> list[str]:
        """Every tool result the model was shown by its last call, in order."""
        seen = []
        for message in self.sent[-1] if self.sent else []:
            content = str(message.get("content", ""))
            if message.get("role") == "assistant" and "\nObservation: " in content:
                seen.append(content.split("\nObservation: ", 1)[1])
        return seen


def shop_crew(llm: ScriptLLM, *tools: Any, run_id: Any = None, stop: bool = True) -> Crew:
    """A one-task crew whose agent offers the ``@effect`` tools, pausing on an unconfirmed one."""
    agent = Agent(
        role="billing clerk",
        goal="Capture the invoice the customer asked for",
        backstory="Works the payments desk.",
        llm=llm,
        tools=[as_crewai_tool(fn, run_id=run_id) for fn in tools],
        step_callback=stop_on_unconfirmed if stop else None,
        max_retry_limit=0,
        verbose=False,
    )
    task = Task(
        description="Capture invoice INV-7 for 700 cents.",
        expected_output="One line saying what was captured.",
        agent=agent,
    )
    return Crew(agents=[agent], tasks=[task], verbose=False)
