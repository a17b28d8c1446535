"""The options of ``@effect``: each keyword is a field of :class:`EffectContract`.

``@effect``'s keyword signature (explicit and typed, for users and type
checkers) is the one place the options are listed. Each keyword sets the
contract field of the same name, or of the name :data:`RENAMED` gives it,
except the few in :data:`DECORATOR_ONLY`; ``tests/decorator/
test_decorator_options.py`` fails if the keywords and the fields drift apart.
:class:`EffectContract` alone validates the values: the decorator only turns
the forms a decorator accepts (templates, timedeltas, a codec type) into the
contract's, which needs the decorated function.

Adding a contract option is: a field (and its check) in :class:`EffectContract`,
a keyword in ``effect()``, and a line in ``docs/effect-contracts-and-recovery.md``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

__all__ = ["DECORATOR_ONLY", "RENAMED", "Options", "contract_field", "keyword_for"]

#: ``@effect`` keywords whose contract field has a longer name.
RENAMED: Mapping[str, str] = MappingProxyType(
    {
        "idempotency_key": "provider_idempotency_key",
        "idempotency_guaranteed": "provider_idempotency_guaranteed",
        "probe": "outcome_probe",
        "timeout": "handler_timeout",
        "lease": "lease_seconds",
        "provider_key_retention": "provider_key_retention_seconds",
    }
)

#: ``@effect`` keywords that are about the decorated tool, not its contract.
DECORATOR_ONLY = frozenset({"executor"})

_KEYWORDS = MappingProxyType({field: keyword for keyword, field in RENAMED.items()})


def contract_field(keyword: str) -> str:
    """Return the :class:`EffectContract` field the ``@effect`` keyword ``keyword`` sets."""
    return RENAMED.get(keyword, keyword)


def keyword_for(field: str) -> str:
    """Return the ``@effect`` keyword that sets the contract field ``field``."""
    return _KEYWORDS.get(field, field)


@dataclasses.dataclass(frozen=True, slots=True)
class Options:
    """One ``@effect(...)``'s settings, as given: contract fields by name, and the executor."""

    fields: Mapping[str, Any]
    executor: Any

    @classmethod
    def from_keywords(cls, keywords: Mapping[str, Any]) -> Options:
        """Sort ``@effect``'s keyword arguments into contract fields and the executor."""
        fields = {contract_field(k): v for k, v in keywords.items() if k not in DECORATOR_ONLY}
        return cls(MappingProxyType(fields), keywords.get("executor"))
