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

A call of an ``@effect(requires_approval=...)`` tool that has no approval is
recorded AWAITING_APPROVAL (nothing sent) and interrupts with an
:class:`~effectguard.adapters.ApprovalRequest` payload (``kind``
``"effectguard.approval"``): the request as the ledger holds it, redacted
values masked, and the commands that approve or deny it. :func:`approvals`
lists them; :func:`approve_pending` / :func:`deny_pending` write the
application's decision to the ledger and return the resume ``Command``. The
decision is the ledger's, never the resume value's: on resume an approved
call is sent once, one still awaiting interrupts again, a denied one is an
error ``ToolMessage`` that invites no retry.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Sequence
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

from effectguard.adapters._approval import ApprovalRequest, decide, is_approval_payload
from effectguard.adapters._common import PendingEffect, is_pending_payload
from effectguard.adapters._langgraph_node import EffectToolNode
from effectguard.adapters._langgraph_tool import as_tool, atool_call_wrapper, tool_call_wrapper
from effectguard.errors import ConfigurationError
from effectguard.ledger import EffectLedger

__all__ = [
    "RESUME_VALUE",
    "EffectToolNode",
    "aapprovals",
    "aapprove_pending",
    "adeny_pending",
    "apending_effects",
    "approvals",
    "approve_pending",
    "as_tool",
    "atool_call_wrapper",
    "deny_pending",
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


def _ours(value: Any) -> bool:
    return is_pending_payload(value) or is_approval_payload(value)


def _command(interrupts: Sequence[Any]) -> Command[Any]:
    ids = {item.id: RESUME_VALUE for item in interrupts if _ours(item.value)}
    if not ids:
        msg = "the thread is not paused on any effectguard effect: nothing to resume"
        raise ConfigurationError(msg)
    return Command(resume=ids)


def resume_command(graph: Any = None, config: Any = None) -> Command[Any]:
    """The ``Command`` resuming a thread paused on unconfirmed effects or approvals.

    With ``graph`` and ``config`` it answers each of the thread's effectguard
    interrupts (pending effects and approval requests) by id, as LangGraph
    requires when several are pending (other interrupts stay pending); without
    them it is ``Command(resume=RESUME_VALUE)``, enough for one pending
    interrupt. The value is never trusted: resumed tools read the ledger
    again. Raises :class:`ConfigurationError` when the thread waits on no effect.
    """
    if graph is None:
        return Command(resume=RESUME_VALUE)
    return _command(graph.get_state(config, subgraphs=True).interrupts)


def _approvals(interrupts: Sequence[Any]) -> list[ApprovalRequest]:
    return [
        ApprovalRequest.from_json(item.value)
        for item in interrupts
        if is_approval_payload(item.value)
    ]


def approvals(graph: Any, config: Any) -> list[ApprovalRequest]:
    """The approval requests the thread of ``config`` is paused on (empty when none).

    Each holds the request as the ledger recorded it (redacted values
    masked): what a person must see before deciding. Nothing is run.
    """
    return _approvals(graph.get_state(config, subgraphs=True).interrupts)


async def aapprovals(graph: Any, config: Any) -> list[ApprovalRequest]:
    """:func:`approvals` for a graph with an async checkpointer."""
    return _approvals((await graph.aget_state(config, subgraphs=True)).interrupts)


def _chosen(
    requests: list[ApprovalRequest], tool_call_ids: Collection[str] | None
) -> list[ApprovalRequest]:
    """The requests a decision is for: all of them, or those of ``tool_call_ids`` (all present)."""
    if not requests:
        msg = "the thread is not paused on any approval request: nothing to decide"
        raise ConfigurationError(msg)
    if tool_call_ids is None:
        return requests
    wanted = set(tool_call_ids)
    missing = wanted - {request.tool_call_id for request in requests}
    if missing:
        msg = (
            f"the thread waits for no approval of tool call(s) {sorted(missing)}; nothing was "
            "written"
        )
        raise ConfigurationError(msg)
    return [request for request in requests if request.tool_call_id in wanted]


def _decide_all(
    ledger: EffectLedger,
    requests: list[ApprovalRequest],
    *,
    approve: bool,
    actor: str,
    reason: str,
    evidence_reference: str,
    expires_in: float | None,
) -> None:
    for request in requests:
        decide(
            ledger,
            request,
            approve=approve,
            actor=actor,
            reason=reason,
            evidence_reference=evidence_reference,
            expires_in=expires_in,
        )


def approve_pending(
    graph: Any,
    config: Any,
    *,
    ledger: EffectLedger,
    actor: str,
    reason: str,
    evidence_reference: str,
    expires_in: float | None = None,
    tool_call_ids: Collection[str] | None = None,
) -> Command[Any]:
    """Approve in ``ledger`` the requests the thread is paused on; the ``Command`` that resumes it.

    Each approval is of exactly the request the ledger holds and was shown in
    the interrupt (bound to its event count: a request that moved on since is
    refused with :class:`~effectguard.errors.OperationChangedError`), audited
    like every resolution (actor, reason, evidence reference, OS user, host,
    the fingerprint approved); ``expires_in`` (seconds) voids it if no call
    has used it by then. ``tool_call_ids`` picks which requests (default:
    every one). Resuming with the command sends each approved request once;
    the resume value itself approves nothing. Raises
    :class:`ConfigurationError`, before anything is written, when the thread
    waits on no such approval.
    """
    state = graph.get_state(config, subgraphs=True)
    chosen = _chosen(_approvals(state.interrupts), tool_call_ids)
    _decide_all(
        ledger,
        chosen,
        approve=True,
        actor=actor,
        reason=reason,
        evidence_reference=evidence_reference,
        expires_in=expires_in,
    )
    return _command(state.interrupts)


def deny_pending(
    graph: Any,
    config: Any,
    *,
    ledger: EffectLedger,
    actor: str,
    reason: str,
    evidence_reference: str,
    tool_call_ids: Collection[str] | None = None,
) -> Command[Any]:
    """Deny in ``ledger`` the requests the thread is paused on; the ``Command`` that resumes it.

    A denied request is REJECTED and never sent; on resume its tool answers
    the model with an error ``ToolMessage`` that invites no retry. Bound to
    the state shown, audited and picked as in :func:`approve_pending`.
    """
    state = graph.get_state(config, subgraphs=True)
    chosen = _chosen(_approvals(state.interrupts), tool_call_ids)
    _decide_all(
        ledger,
        chosen,
        approve=False,
        actor=actor,
        reason=reason,
        evidence_reference=evidence_reference,
        expires_in=None,
    )
    return _command(state.interrupts)


async def aapprove_pending(
    graph: Any,
    config: Any,
    *,
    ledger: EffectLedger,
    actor: str,
    reason: str,
    evidence_reference: str,
    expires_in: float | None = None,
    tool_call_ids: Collection[str] | None = None,
) -> Command[Any]:
    """:func:`approve_pending` for a graph with an async checkpointer; ledger writes in a thread."""
    state = await graph.aget_state(config, subgraphs=True)
    chosen = _chosen(_approvals(state.interrupts), tool_call_ids)
    await asyncio.to_thread(
        _decide_all,
        ledger,
        chosen,
        approve=True,
        actor=actor,
        reason=reason,
        evidence_reference=evidence_reference,
        expires_in=expires_in,
    )
    return _command(state.interrupts)


async def adeny_pending(
    graph: Any,
    config: Any,
    *,
    ledger: EffectLedger,
    actor: str,
    reason: str,
    evidence_reference: str,
    tool_call_ids: Collection[str] | None = None,
) -> Command[Any]:
    """:func:`deny_pending` for a graph with an async checkpointer; ledger writes in a thread."""
    state = await graph.aget_state(config, subgraphs=True)
    chosen = _chosen(_approvals(state.interrupts), tool_call_ids)
    await asyncio.to_thread(
        _decide_all,
        ledger,
        chosen,
        approve=False,
        actor=actor,
        reason=reason,
        evidence_reference=evidence_reference,
        expires_in=None,
    )
    return _command(state.interrupts)
