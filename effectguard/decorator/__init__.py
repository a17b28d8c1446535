"""``@effect`` and what it builds: the tool proxy, signature binding and identity templates.

:mod:`~effectguard.decorator.decorate` is the decorator users apply, whose
keywords :mod:`~effectguard.decorator.options` maps onto the contract's fields;
:mod:`~effectguard.decorator.tool` runs each call of a decorated tool through
an executor; :mod:`~effectguard.decorator.binding` turns a call into
arguments and :mod:`~effectguard.decorator.templates` turns arguments into
operation ids and provider keys. This layer uses the executor; the executor
never imports it.
"""

from effectguard.decorator.decorate import (
    INJECTED,
    AsyncEffectFunction,
    EffectDecorator,
    EffectFunction,
    effect,
    executor_of,
    get_contract,
    is_effect,
    operation_id_of,
    use_executor,
)

__all__ = [
    "INJECTED",
    "AsyncEffectFunction",
    "EffectDecorator",
    "EffectFunction",
    "effect",
    "executor_of",
    "get_contract",
    "is_effect",
    "operation_id_of",
    "use_executor",
]
