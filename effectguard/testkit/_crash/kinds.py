"""The four kinds of effect contract the fault matrix covers, built over the fakes.

Each kind is a provider's guarantee and the contract that honestly declares it:

- ``guaranteed-key``: the provider deduplicates an idempotency key (documented),
  there is no lookup; the contract forwards a stable key and declares it guaranteed.
- ``authoritative-probe``: no idempotency; a read-your-writes lookup whose
  "not found" is authoritative; the contract probes it.
- ``eventual-probe``: no idempotency; an eventually consistent lookup whose
  "not found" proves nothing; the contract probes it and keeps unknown outcomes
  open for a later read.
- ``no-guarantee``: no idempotency and no lookup; the contract can only quarantine.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from effectguard._contract import EffectContract, UnknownOutcomePolicy
from effectguard.errors import InternalError
from effectguard.testkit.fakes.base import FakeProvider, Lookup
from effectguard.testkit.fakes.mail import FakeEmailProvider
from effectguard.testkit.fakes.payments import FakePaymentProvider
from effectguard.testkit.faults import FaultPlan

__all__ = ["ContractKind", "Service", "Setup", "build_setup"]


class ContractKind(enum.StrEnum):
    """What the provider guarantees, and so what the contract may declare."""

    GUARANTEED_KEY = "guaranteed-key"
    AUTHORITATIVE_PROBE = "authoritative-probe"
    EVENTUAL_PROBE = "eventual-probe"
    NO_GUARANTEE = "no-guarantee"


class Service(enum.StrEnum):
    """Which fake provider an effect goes to."""

    PAYMENT = "payment"
    EMAIL = "email"


@dataclass(frozen=True, slots=True)
class Setup:
    """A provider, the contract for it, one call's arguments, and the handler to execute."""

    kind: ContractKind
    service: Service
    provider: FakeProvider
    contract: EffectContract
    arguments: Mapping[str, Any]
    handler: Callable[..., Any]
    subject: str = ""
    visible_after_reads: int = 2
    lease_seconds: float = 30.0
    broken_key: bool = False

    @property
    def operation_id(self) -> str:
        """The business operation id of :attr:`arguments`."""
        return self.contract.identity(self.arguments)[0]

    @property
    def reference(self) -> str:
        """What the provider files this operation's effect under (its key or Message-ID)."""
        key = self.contract.identity(self.arguments)[1]
        if key is None:
            msg = f"contract kind {self.kind!r} forwards no provider key"
            raise InternalError(msg)
        return key


_LOOKUPS = {
    ContractKind.GUARANTEED_KEY: Lookup.NONE,
    ContractKind.AUTHORITATIVE_PROBE: Lookup.STRONG,
    ContractKind.EVENTUAL_PROBE: Lookup.EVENTUAL,
    ContractKind.NO_GUARANTEE: Lookup.NONE,
}


def _payment_operation(arguments: Mapping[str, Any]) -> str:
    return f"invoice:{arguments['invoice_id']}:capture"


def _payment_key(arguments: Mapping[str, Any]) -> str:
    return f"capture:{arguments['invoice_id']}"


def _email_operation(arguments: Mapping[str, Any]) -> str:
    return f"receipt:{arguments['to']}:{arguments['subject']}"


def _email_key(arguments: Mapping[str, Any]) -> str:
    return FakeEmailProvider.message_id_for(_email_operation(arguments))


def build_setup(
    kind: ContractKind,
    service: Service,
    subject: str,
    *,
    faults: FaultPlan | None = None,
    path: str | os.PathLike[str] | None = None,
    visible_after_reads: int = 2,
    amount_cents: int = 1999,
    lease_seconds: float = 30.0,
    max_attempts: int = 3,
    late_commit_after: float = 5.0,
    broken_key: bool = False,
) -> Setup:
    """Build the provider and contract of ``kind`` for one business ``subject``.

    ``broken_key`` makes the handler send a fresh key on every request while
    the contract still declares the provider's guarantee: the classic bug the
    fault matrix must catch as duplicate effects. A guaranteed key is a payment
    feature here; email has none.
    """
    kind, service = ContractKind(kind), Service(service)
    if kind is ContractKind.GUARANTEED_KEY and service is not Service.PAYMENT:
        msg = "only the payment provider offers guaranteed idempotency keys"
        raise ValueError(msg)
    guaranteed = kind is ContractKind.GUARANTEED_KEY
    lookup = _LOOKUPS[kind]
    provider: FakeProvider
    if service is Service.PAYMENT:
        provider = FakePaymentProvider(
            idempotency_guaranteed=guaranteed,
            lookup=lookup,
            visible_after_reads=visible_after_reads,
            faults=faults,
            path=path,
            late_commit_after=late_commit_after,
        )
        arguments: dict[str, Any] = {"invoice_id": subject, "amount_cents": amount_cents}
        operation, key = _payment_operation, _payment_key
    else:
        provider = FakeEmailProvider(
            lookup=lookup,
            visible_after_reads=visible_after_reads,
            faults=faults,
            path=path,
            late_commit_after=late_commit_after,
        )
        arguments = {
            "to": f"customer-{subject}@example.test",
            "subject": f"Receipt {subject}",
            "body": f"We received {amount_cents} cents. Thank you.",
        }
        operation, key = _email_operation, _email_key
    probe = provider.probe if lookup is not Lookup.NONE else None
    policy = (
        UnknownOutcomePolicy.KEEP_UNKNOWN
        if kind is ContractKind.EVENTUAL_PROBE
        else UnknownOutcomePolicy.QUARANTINE
    )
    contract = EffectContract(
        name=f"{service.value}-{kind.value}",
        operation_id=operation,
        provider_idempotency_key=key,
        provider_idempotency_guaranteed=guaranteed,
        outcome_probe=probe,
        unknown_outcome=policy,
        lease_seconds=lease_seconds,
        max_attempts=max_attempts,
        # The fakes refuse the connection (Fault.UNREACHABLE) before anything is sent.
        not_sent_on=(ConnectionRefusedError,),
    )
    handler: Callable[..., Any] = provider.handler
    if broken_key:
        handler = _fresh_key_per_request(provider)
    return Setup(
        kind,
        service,
        provider,
        contract,
        arguments,
        handler,
        subject=subject,
        visible_after_reads=visible_after_reads,
        lease_seconds=lease_seconds,
        broken_key=broken_key,
    )


def _fresh_key_per_request(provider: FakeProvider) -> Callable[..., Any]:
    """A handler that ignores the executor's key and sends a new one on every request."""
    send = provider.handler

    def handler(arguments: Mapping[str, Any], *, idempotency_key: str | None) -> Any:
        # The provider's durable request count, so the key also changes across processes.
        return send(arguments, idempotency_key=f"{idempotency_key}~{provider.attempts() + 1}")

    return handler
