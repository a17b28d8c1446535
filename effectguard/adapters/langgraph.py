"""LangGraph: ``@effect`` tools whose uncertain outcome pauses the graph, and resumes safely.

Needs ``pip install 'effectguard[langgraph]'`` (langgraph 1.2, langchain-core 1.8).

- :func:`as_tool` makes a ``StructuredTool`` of an ``@effect`` function: its
  schema holds the business parameters with the docstring's descriptions, and
  the tool call id is injected (``InjectedToolCallId``), hidden from the model.
- :func:`tool_call_wrapper` / :func:`atool_call_wrapper` do the same for
  ``@effect`` functions registered with a ``ToolNode`` as plain functions
  (``ToolNode(tools, wrap_tool_call=..., awrap_tool_call=...)``).
- :class:`EffectToolNode` is a ``ToolNode`` that lets every sibling tool call
  finish before an interrupt propagates, and refuses to run without a checkpointer.

Every call runs under the call scope ``run_id=<thread_id>`` (followed by the
names of the enclosing subgraph nodes, when it runs in one) and
``call_id=<tool call id>``: both are kept by the checkpoint, so an operation
id from ``call_scoped(prefix)`` is the same after a resume in another process.
A call outside a graph, or in a graph without a checkpointer, is refused with
:class:`~effectguard.ConfigurationError` before anything is sent: a pause that
could never be resumed is useless. An effect whose outcome is not confirmed
calls ``langgraph.types.interrupt`` with the
:class:`~effectguard.adapters.PendingEffect` payload. On resume the value
given is never trusted: the ledger is read again (an OUTCOME_UNKNOWN operation
probed again), and the run pauses again while the operation is unresolved; a
QUARANTINED operation is never dispatched. LangGraph re-runs the whole tools
node on resume; a sibling already CONFIRMED is replayed from the ledger, not
re-sent. :func:`pending_effects` lists what a paused thread waits on and
:func:`resume_command` builds the ``Command`` that resumes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

try:
    import langchain_core
    import langgraph
except ModuleNotFoundError as exc:
    msg = (
        f"effectguard.adapters.langgraph needs the 'langgraph' extra ({exc.name} is not "
        "installed): pip install 'effectguard[langgraph]'"
    )
    raise ImportError(msg, name=exc.name) from exc

from langgraph.types import Command

from effectguard.adapters._common import PendingEffect, is_pending_payload
from effectguard.adapters._langgraph_node import EffectToolNode
from effectguard.adapters._langgraph_tool import as_tool, atool_call_wrapper, tool_call_wrapper
from effectguard.errors import ConfigurationError

__all__ = [
    "RESUME_VALUE",
    "EffectToolNode",
    "apending_effects",
    "as_tool",
    "atool_call_wrapper",
    "pending_effects",
    "resume_command",
    "tool_call_wrapper",
]

#: What :func:`resume_command` resumes with. Never trusted: the ledger decides.
RESUME_VALUE: dict[str, str] = {"effectguard": "re-read the ledger"}

# Imported only to name the extra when missing.
del langchain_core, langgraph


def _pending(interrupts: Sequence[Any]) -> list[PendingEffect]:
    return [
        PendingEffect.from_json(item.value) for item in interrupts if is_pending_payload(item.value)
    ]


def pending_effects(graph: Any, config: Any) -> list[PendingEffect]:
    """The unconfirmed effects the thread of ``config`` is paused on (empty when none).

    ``graph`` is the compiled graph; its checkpointer is read, nothing is run.
    """
    return _pending(graph.get_state(config, subgraphs=True).interrupts)


async def apending_effects(graph: Any, config: Any) -> list[PendingEffect]:
    """:func:`pending_effects` for a graph with an async checkpointer."""
    return _pending((await graph.aget_state(config, subgraphs=True)).interrupts)


def resume_command(graph: Any = None, config: Any = None) -> Command[Any]:
    """The ``Command`` resuming a thread paused on unconfirmed effects.

    With ``graph`` and ``config`` it answers each of the thread's effectguard
    interrupts by id, as LangGraph requires when several are pending (other
    interrupts, such as a person's approval, stay pending); without them it is
    ``Command(resume=RESUME_VALUE)``, enough for one pending interrupt. The
    value is never trusted: resumed tools read the ledger again. Raises
    :class:`ConfigurationError` when the thread waits on no effect.
    """
    if graph is None:
        return Command(resume=RESUME_VALUE)
    interrupts = graph.get_state(config, subgraphs=True).interrupts
    ids = {item.id: RESUME_VALUE for item in interrupts if is_pending_payload(item.value)}
    if not ids:
        msg = "the thread is not paused on any effectguard effect: nothing to resume"
        raise ConfigurationError(msg)
    return Command(resume=ids)
