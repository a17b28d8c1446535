"""Identity templates: ``"invoice:{invoice_id}:capture"`` checked once, formatted per call.

A template is checked against the tool's parameters when the tool is
decorated, so a misspelt name fails at import time rather than at the first
call, when a payment may already be on its way. Besides parameters, a
template may name ``{run_id}`` and ``{call_id}`` of the active
:func:`~effectguard.call_scope`; a tool parameter of the same name takes
precedence, and a call outside any scope is a :class:`ConfigurationError`
before anything is recorded.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Collection, Iterator

from effectguard.contract import Arguments
from effectguard.errors import ConfigurationError
from effectguard.scope import SCOPE_FIELDS, require_scope

__all__ = ["IdentityTemplate", "compile_identity"]

_ROOT = re.compile(r"[.\[]")


def _fields(template: str) -> Iterator[str]:
    """Yield every replacement field of ``template``, nested ones in format specs too."""
    for _, field, spec, _ in string.Formatter().parse(template):
        if field is not None:
            yield field
        if spec:
            yield from _fields(spec)


class IdentityTemplate:
    """A ``str.format`` template over a call's arguments, e.g. ``"invoice:{invoice_id}:capture"``.

    Fields name parameters, optionally with index access (``"{order[id]}"``),
    or the ``scoped`` fields of the call scope. Formatting never fails for a
    field the tool does not have: that was refused when the template was made.
    """

    __slots__ = ("scoped", "template", "tool", "what")

    def __init__(
        self, template: str, what: str, scoped: Collection[str] = (), tool: str = "a tool"
    ) -> None:
        self.template = template
        self.what = what
        self.scoped = tuple(scoped)
        self.tool = tool

    def __call__(self, arguments: Arguments) -> str:
        """Return the template filled from ``arguments``; a missing name is a ConfigurationError."""
        if self.scoped:
            scope = require_scope(f"{self.tool}: {self.what} template {self.template!r}")
            arguments = {**{name: getattr(scope, name) for name in self.scoped}, **arguments}
        try:
            return self.template.format_map(arguments)
        except (LookupError, AttributeError, TypeError, ValueError) as exc:
            msg = f"{self.what} template {self.template!r} cannot be formatted for this call: {exc}"
            raise ConfigurationError(msg) from exc

    def __repr__(self) -> str:
        return f"IdentityTemplate({self.template!r})"


def compile_identity(
    spec: str | Callable[[Arguments], str],
    *,
    what: str,
    tool: str,
    parameters: Collection[str],
    redacted: Collection[str],
) -> Callable[[Arguments], str]:
    """Return the callable computing ``what`` (an operation id or a key) from the arguments.

    ``spec`` is a template or a callable taking the arguments mapping. A
    template that is malformed, uses positional fields, names something that is
    neither one of ``parameters`` nor a call-scope field (``run_id``,
    ``call_id``), or names a ``redacted`` one (whose value would then be stored
    in the clear) is a :class:`ConfigurationError`.
    """
    if callable(spec):
        return spec
    if not isinstance(spec, str) or not spec:
        msg = (
            f"{tool}: {what} must be a non-empty str.format template or a callable "
            f"taking the arguments mapping, not {spec!r}"
        )
        raise ConfigurationError(msg)
    try:
        fields = list(_fields(spec))
    except ValueError as exc:
        msg = f"{tool}: {what} template {spec!r} is malformed: {exc}"
        raise ConfigurationError(msg) from exc
    scoped: set[str] = set()
    for field in fields:
        root = _ROOT.split(field, maxsplit=1)[0]
        if not root or root.isdigit():
            msg = (
                f"{tool}: {what} template {spec!r} has a positional field {{{field}}}; "
                "name a parameter instead"
            )
            raise ConfigurationError(msg)
        if root not in parameters and root in SCOPE_FIELDS:
            scoped.add(root)  # a parameter of that name wins: the tool's own value
            continue
        if root not in parameters:
            known = ", ".join(parameters) or "none"
            msg = (
                f"{tool}: {what} template {spec!r} names {root!r}, which is not a parameter "
                f"(parameters: {known}) nor a call-scope field ({', '.join(SCOPE_FIELDS)})"
            )
            raise ConfigurationError(msg)
        if root in redacted:
            msg = (
                f"{tool}: {what} template {spec!r} names the redacted parameter {root!r}, "
                "whose value would then be stored in the clear"
            )
            raise ConfigurationError(msg)
    return IdentityTemplate(spec, what, sorted(scoped), tool)
