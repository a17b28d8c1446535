"""Framework adapters: ``@effect`` tools as native tools of agent frameworks.

Each adapter lives in its own module behind its own extra
(``effectguard.adapters.langgraph`` needs ``effectguard[langgraph]``…) and maps
an unconfirmed effect onto the framework's own pause; on resume it re-reads
the ledger, never trusting the resume value, and never dispatches a
QUARANTINED operation. This package imports no framework, and the core never
imports it. What every adapter shares is exported here: the pending payload a
paused run carries (:class:`PendingEffect`), the outcome of one call, and the
framework-free steps (:func:`run_effect`, :func:`resume_effect`) an adapter for
another framework can be built on, and the payload of a request awaiting a
person's approval (:class:`ApprovalRequest`). :mod:`effectguard.adapters.mcp_proxy`
(extra ``mcp``) guards an MCP server written elsewhere, from outside.
"""

from effectguard._describe import PublicSignature, public_signature
from effectguard.adapters._approval import APPROVAL_KIND, ApprovalRequest, is_approval_payload
from effectguard.adapters._common import (
    PENDING_KIND,
    Confirmed,
    Outcome,
    Pending,
    PendingEffect,
    Refused,
    is_pending_payload,
    resume_effect,
    resume_effect_async,
    run_effect,
    run_effect_async,
)

__all__ = [
    "APPROVAL_KIND",
    "PENDING_KIND",
    "ApprovalRequest",
    "Confirmed",
    "Outcome",
    "Pending",
    "PendingEffect",
    "PublicSignature",
    "Refused",
    "is_approval_payload",
    "is_pending_payload",
    "public_signature",
    "resume_effect",
    "resume_effect_async",
    "run_effect",
    "run_effect_async",
]
