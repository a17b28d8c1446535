"""What a transition or a call's result becomes on a span: events, attributes, error.type.

Pure functions of what the executor's observer hook reports, so the span
code stays small and every mapping is written once. Only what the hook
already cleared of redacted values is read (statuses, attempts, probe
answers, exception type names); no free text from a handler or probe is
copied into an event.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from effectguard._executor import Transition
from effectguard._fingerprint import canonical_json
from effectguard._model import EffectStatus
from effectguard.otel import names

__all__ = ["Event", "argument_attributes", "error_type", "events_of", "result_attributes"]

#: One span event: its name and attributes.
Event = tuple[str, dict[str, Any]]

_UNKNOWN = frozenset({EffectStatus.OUTCOME_UNKNOWN, EffectStatus.RECONCILING})
_DEFAULT_ERROR = {
    EffectStatus.AWAITING_APPROVAL: "effectguard.awaiting_approval",
    EffectStatus.REJECTED: "effectguard.rejected",
    EffectStatus.PREPARED: "effectguard.not_sent",
    EffectStatus.DISPATCHED: "effectguard.in_progress",
}


def events_of(transition: Transition) -> list[Event]:
    """The span events of one reported transition or result, in order.

    A transition out of RECONCILING is preceded by a ``probe`` event with the
    probe's answer; a replayed result is a ``replayed`` event; a fresh result
    adds no event (its attributes say it).
    """
    if transition.final:
        if not transition.replayed:
            return []
        return [("replayed", {names.STATUS: transition.to_status.value})]
    if transition.event is None:  # pragma: no cover - a transition always names its event
        return []
    found: list[Event] = []
    evidence = transition.evidence
    probe = evidence.get("probe")
    if transition.from_status is EffectStatus.RECONCILING and isinstance(probe, str):
        probed: dict[str, Any] = {names.PROBE_STATUS: probe}
        if isinstance(evidence.get("probes"), int):
            probed["effectguard.probes"] = evidence["probes"]
        found.append(("probe", probed))
    attributes: dict[str, Any] = {
        names.ATTEMPT: transition.attempt,
        names.TO_STATUS: transition.to_status.value,
    }
    if transition.from_status is not None:
        attributes[names.FROM_STATUS] = transition.from_status.value
    error = evidence.get("error")
    if isinstance(error, Mapping) and isinstance(error.get("type"), str):
        attributes[names.ERROR_TYPE] = error["type"]
    if isinstance(evidence.get("overlap_risk"), bool):
        attributes[names.OVERLAP_RISK] = evidence["overlap_risk"]
    found.append((transition.event.value, attributes))
    return found


def error_type(transition: Transition) -> str | None:
    """``error.type`` of a call's result: None when CONFIRMED, else what kept it from confirming."""
    status = transition.to_status
    if status is EffectStatus.CONFIRMED:
        return None
    if status is EffectStatus.QUARANTINED:
        return "effectguard.quarantined"
    if status in _UNKNOWN:
        return "effectguard.outcome_unknown"
    return transition.error_type or _DEFAULT_ERROR.get(status, f"effectguard.{status.value}")


def result_attributes(transition: Transition, overlap_risk: bool) -> dict[str, Any]:
    """An effect span's attributes once its call has a result."""
    result = transition.result
    attributes: dict[str, Any] = {
        names.STATUS: transition.to_status.value,
        names.ATTEMPTS: transition.attempt,
        names.REPLAYED: transition.replayed,
        names.OVERLAP_RISK: overlap_risk or bool(transition.evidence.get("overlap_risk")),
    }
    if result is not None and result.provider_operation_id is not None:
        attributes[names.PROVIDER_OPERATION_ID] = result.provider_operation_id
    return attributes


def argument_attributes(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """One attribute per argument (redacted ones already masked): scalars as they are, else JSON."""
    attributes: dict[str, Any] = {}
    for name, value in arguments.items():
        if isinstance(value, str | bool | int | float):
            attributes[names.argument_attribute(name)] = value
        else:
            attributes[names.argument_attribute(name)] = canonical_json(value)
    return attributes
