"""A real worker process killed with SIGKILL after its request committed."""

from __future__ import annotations

from effectguard._model import EffectStatus, EventType
from effectguard.testkit._crash.child import ChildRun, run_child
from effectguard.testkit._crash.kinds import ContractKind, Service, build_setup
from effectguard.testkit.faults import Fault, FaultPlan
from effectguard.testkit.scenarios._base import ScenarioEnv, scenario
from effectguard.testkit.scenarios._report import ScenarioReport

__all__: list[str] = []


@scenario("crash-after-dispatch")
def crash_after_dispatch(env: ScenarioEnv) -> ScenarioReport:
    """A child process claims the capture, the provider commits it, the child is SIGKILLed.

    Ledger and provider are files shared with the child, which is a real
    process killed before it could record anything. The provider has no
    idempotency; its lookup is read-your-writes. Recovery runs in this process.

    Invariant: the kill leaves the operation DISPATCHED under a lease that has
    not expired; recovery proves the owner's process gone instead of waiting,
    probes, and CONFIRMS the committed capture without resending; the provider
    holds exactly one capture.
    """
    provider_path = env.workdir / "provider.db"
    faults = FaultPlan({1: Fault.CRASH_AFTER_COMMIT})
    kind, service = ContractKind.AUTHORITATIVE_PROBE, Service.PAYMENT
    setup = build_setup(
        kind,
        service,
        env.subject,
        faults=faults,
        path=provider_path,
        amount_cents=env.amount_cents,
    )
    ledger = env.open_ledger()
    operation_id = setup.operation_id
    env.require_fresh(ledger, operation_id)
    child = run_child(
        ChildRun(
            ledger_path=str(env.ledger_path),
            provider_path=str(provider_path),
            kind=kind,
            service=service,
            subject=env.subject,
            faults=faults,
            now=env.clock(),
            amount_cents=env.amount_cents,
        )
    )
    left = ledger.get(operation_id)
    committed_by_child = setup.provider.committed()
    result = env.executor(ledger).execute(setup.contract, setup.arguments, setup.handler)
    events = ledger.events(operation_id)
    expired = [
        event for event in events if event.type in {EventType.LEASE_EXPIRED, EventType.OWNER_GONE}
    ]
    return env.report(
        ledger=ledger,
        provider=setup.provider,
        operation_id=operation_id,
        checks=[
            ("the child was killed by SIGKILL", child.killed),
            (
                "it left the operation DISPATCHED under a live lease",
                left is not None and left.status is EffectStatus.DISPATCHED and left.lease_live,
            ),
            ("the provider committed the capture before the kill", committed_by_child == 1),
            (
                "recovery proved the owner gone",
                bool(expired) and expired[0].evidence.get("owner_gone") is True,
            ),
            ("recovery CONFIRMED it", result.status is EffectStatus.CONFIRMED),
            ("nothing was resent", result.attempts == 1 and setup.provider.attempts() == 1),
            ("the provider holds exactly one capture", setup.provider.committed() == 1),
        ],
        details={"child_exit_code": child.exitcode},
    )
