"""Permission policies: which tool calls run, which are refused, which wait for a person.

A policy is any callable taking a :class:`ToolRequest` and returning a
:class:`Decision`. The runtime asks it once per tool call, after the
arguments are validated and before any handler runs; the decision is recorded
in the run's checkpoint, so a call that was allowed and dispatched is
reconciled on resume even if the policy has changed since (refusing it then
would hide an effect that may already have happened).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from effectguard.runtime.llm import ToolCall
from effectguard.runtime.tools import ToolDefinition

__all__ = [
    "Decision",
    "PermissionPolicy",
    "ToolRequest",
    "allow_all",
    "allow_list",
    "require_approval",
]


class Decision(enum.StrEnum):
    """What a permission policy decided for one tool call."""

    ALLOW = "ALLOW"
    """Run it."""

    DENY = "DENY"
    """Do not run it; the model is told the call was denied."""

    REQUIRE_APPROVAL = "REQUIRE_APPROVAL"
    """Wait: the run is WAITING until ``runtime.approve`` (or ``runtime.deny``)."""


@dataclass(frozen=True, slots=True)
class ToolRequest:
    """One tool call as a policy sees it: the run, the call, its tool and valid arguments."""

    run_id: str
    call: ToolCall
    tool: ToolDefinition
    arguments: Mapping[str, Any]

    @property
    def effectful(self) -> bool:
        """True when the tool has an effect contract (it is not read-only)."""
        return self.tool.contract is not None


#: ``policy(request) -> Decision``.
PermissionPolicy = Callable[[ToolRequest], Decision]


def allow_all() -> PermissionPolicy:
    """Allow every call."""

    def policy(request: ToolRequest) -> Decision:  # noqa: ARG001 - every request is allowed
        return Decision.ALLOW

    policy.__qualname__ = "allow_all()"
    return policy


def allow_list(names: Iterable[str]) -> PermissionPolicy:
    """Allow calls of the named tools; deny every other."""
    allowed = frozenset([names] if isinstance(names, str) else names)

    def policy(request: ToolRequest) -> Decision:
        return Decision.ALLOW if request.tool.name in allowed else Decision.DENY

    policy.__qualname__ = f"allow_list({sorted(allowed)})"
    return policy


def require_approval(names: Iterable[str] | None = None) -> PermissionPolicy:
    """Make the named tools (by default every tool with an effect contract) wait for approval.

    Every other call is allowed.
    """
    named = None if names is None else frozenset([names] if isinstance(names, str) else names)

    def policy(request: ToolRequest) -> Decision:
        needs = request.effectful if named is None else request.tool.name in named
        return Decision.REQUIRE_APPROVAL if needs else Decision.ALLOW

    policy.__qualname__ = f"require_approval({'effects' if named is None else sorted(named)})"
    return policy
