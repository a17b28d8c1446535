"""The calling context of a tool call: which agent run made it, and which of its tool calls it is.

A tool such as ``charge(customer_id, amount_cents, currency)`` has no business
key among its arguments: two identical charges are two operations. What does
identify the operation is who asked for it, the agent run and the model's tool
call, and that stays the same when the run is resumed. :func:`call_scope` sets
them for the code it wraps (the agent runtime does so for every tool call it
makes); :func:`call_scoped` turns them into an operation id, and identity
templates may name ``{run_id}`` and ``{call_id}``.

The scope is a context variable, so it follows the code that runs under it:
nested scopes restore the outer one on exit, threads the library starts and
``asyncio.to_thread`` run in a copy of the caller's context, and asyncio tasks
copy it when they are created.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass

from effectguard._contract import Arguments
from effectguard.errors import ConfigurationError

__all__ = ["SCOPE_FIELDS", "CallScope", "call_scope", "call_scoped", "require_scope"]

#: The names a scope provides to identity templates.
SCOPE_FIELDS = ("run_id", "call_id")

_current: contextvars.ContextVar[CallScope | None] = contextvars.ContextVar(
    "effectguard_call_scope", default=None
)


def _text(value: object, name: str) -> str:
    if not isinstance(value, str) or not value:
        msg = f"call_scope({name}=...) must be a non-empty string, not {value!r}"
        raise ConfigurationError(msg)
    return value


@dataclass(frozen=True, slots=True)
class CallScope:
    """One tool call's context: the agent run it belongs to and the tool call's own id.

    Both must stay the same when the run is resumed, in this process or another,
    since operation ids are derived from them.
    """

    run_id: str
    call_id: str

    def __post_init__(self) -> None:
        _text(self.run_id, "run_id")
        _text(self.call_id, "call_id")

    @staticmethod
    def current() -> CallScope | None:
        """Return the innermost active scope, or None outside any."""
        return _current.get()


@contextlib.contextmanager
def call_scope(*, run_id: str, call_id: str) -> Iterator[CallScope]:
    """Make ``run_id`` and ``call_id`` the call scope of the code in the ``with`` block.

    Nestable: an inner scope replaces the outer one until it exits, which
    restores the outer one, even when the block raises.
    """
    scope = CallScope(run_id, call_id)
    token = _current.set(scope)
    try:
        yield scope
    finally:
        _current.reset(token)


def require_scope(needed_by: str) -> CallScope:
    """Return the active scope; raise :class:`ConfigurationError` naming ``needed_by`` without one.

    Raised while the identity is computed, so before anything is recorded or sent.
    """
    scope = _current.get()
    if scope is None:
        msg = (
            f"{needed_by} needs the call scope (run_id and call_id), and none is active: "
            "run the tool under effectguard.runtime.AgentRuntime, or call it inside "
            "effectguard.call_scope(run_id=..., call_id=...); nothing was recorded or sent"
        )
        raise ConfigurationError(msg)
    return scope


class _Scoped:
    """``operation_id=call_scoped(prefix)``: ``f"{prefix}:{run_id}:{call_id}"`` from the scope."""

    __slots__ = ("prefix",)

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def __call__(self, arguments: Arguments) -> str:  # noqa: ARG002 - the scope, not the arguments
        scope = require_scope(repr(self))
        return f"{self.prefix}:{scope.run_id}:{scope.call_id}"

    def __repr__(self) -> str:
        return f"call_scoped({self.prefix!r})"


def call_scoped(prefix: str) -> _Scoped:
    """Return an ``operation_id=`` callable giving ``f"{prefix}:{run_id}:{call_id}"``.

    The ids come from the active :func:`call_scope`; outside one, computing the
    operation id raises :class:`ConfigurationError` before anything is recorded.
    Name each tool's prefix differently: two tools with one prefix called in one
    tool call would share an operation id.
    """
    if not isinstance(prefix, str) or not prefix:
        msg = f"call_scoped(prefix) needs a non-empty string prefix, not {prefix!r}"
        raise ConfigurationError(msg)
    return _Scoped(prefix)
