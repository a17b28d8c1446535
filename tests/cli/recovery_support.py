"""What the recovery, resolution and runs tests share: a tools module on disk, console scripts.

The tools module is written into the test's directory and imported by the
installed ``agent-effect-ops`` through ``--tools``, as an operator's would be.
Its provider keeps its state in a SQLite file, so the test, the console script
and the module all count the same committed captures. A flag file makes the
probe fail, as a provider's lookup API that is down would.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from effectguard import EffectExecutor, EffectLedger, EffectStatus, use_executor
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan

TOOLS_MODULE = "billing_tools"
OP = "invoice:INV-9:capture"
KEY = "capture:INV-9"
AUDIT = ("--actor", "alice", "--reason", "checked the provider", "--evidence-reference", "T-9")

_SOURCE = '''
"""Billing tools for the operator tests (written by recovery_support)."""
import os
from pathlib import Path

from effectguard import effect
from effectguard.testkit import FakePaymentProvider, Lookup

HERE = Path(__file__).parent
provider = FakePaymentProvider(
    idempotency_guaranteed=False, lookup=Lookup.STRONG, path=HERE / "provider.db"
)


def find_capture(invoice_id: str, amount_cents: int, *, idempotency_key: str):
    if (HERE / "probe-down").exists():
        raise ConnectionError("the provider's lookup API is down")
    if (HERE / "while-probing.py").exists():  # another operator, acting while this one waits
        import runpy

        runpy.run_path(str(HERE / "while-probing.py"))
    return provider.probe({"invoice_id": invoice_id}, idempotency_key=idempotency_key)


@effect(
    name="billing.capture",
    operation_id="invoice:{invoice_id}:capture",
    idempotency_key="capture:{invoice_id}",
    probe=find_capture,
    provider_operation_id="id",
)
def capture(invoice_id: str, amount_cents: int, *, idempotency_key: str) -> dict:
    """Capture a payment for an invoice."""
    return provider.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)


@effect(
    name="billing.capture_later",
    operation_id="invoice:{invoice_id}:capture-later",
    idempotency_key="later:{invoice_id}",
    probe=find_capture,
    unknown_outcome="keep_unknown",
)
def capture_later(invoice_id: str, amount_cents: int, *, idempotency_key: str) -> dict:
    """Capture a payment, leaving an unknown outcome for the next call instead of a person."""
    return provider.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)


@effect(name="billing.refund", operation_id="invoice:{invoice_id}:refund")
def refund(invoice_id: str, amount_cents: int) -> dict:
    """Refund an invoice (no probe: only a person can settle an unknown refund)."""
    return provider.capture(invoice_id, -amount_cents, idempotency_key=f"refund:{invoice_id}")
'''


@dataclass
class Site:
    """A directory holding the tools module, the provider's state and the ledger target."""

    directory: Path
    target: str

    @property
    def provider(self) -> FakePaymentProvider:
        """A handle on the same provider state the tools module uses (faults: none)."""
        return FakePaymentProvider(
            idempotency_guaranteed=False, path=self.directory / "provider.db"
        )

    def probe_down(self, down: bool) -> None:
        """Make the tools module's probe raise (down) or answer (up)."""
        flag = self.directory / "probe-down"
        if down:
            flag.touch()
        else:
            flag.unlink(missing_ok=True)

    def module(self) -> types.ModuleType:
        """Import the tools module in this process (once per site)."""
        if str(self.directory) not in sys.path:
            sys.path.insert(0, str(self.directory))
        sys.modules.pop(TOOLS_MODULE, None)
        return importlib.import_module(TOOLS_MODULE)

    def ops(
        self, *args: str, code: int = 0, db: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run the installed ``agent-effect-ops`` in the site's directory; check the exit code."""
        script = shutil.which("agent-effect-ops", path=str(Path(sys.executable).parent))
        assert script is not None, "agent-effect-ops is not installed in this environment"
        env = {k: v for k, v in os.environ.items() if k != "EFFECTGUARD_TOOLS"}
        done = subprocess.run(
            [script, "--db", db or self.target, *args],
            cwd=self.directory,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
        if code:
            lines = done.stderr.splitlines()
            assert len(lines) == 1, done.stderr
            assert lines[0].startswith("Error: "), done.stderr
        return done

    def ops_json(self, *args: str) -> Any:
        """Run ``agent-effect-ops ... --json`` and parse what it printed."""
        return json.loads(self.ops(*args, "--json").stdout)


def make_site(directory: Path, target: str) -> Site:
    """Write the tools module into ``directory`` and return the site."""
    (directory / f"{TOOLS_MODULE}.py").write_text(textwrap.dedent(_SOURCE), encoding="utf-8")
    return Site(directory, target)


def leave_uncertain(
    site: Site,
    ledger: EffectLedger,
    *,
    committed: bool = True,
    tool: str = "capture",
    invoice: str = "INV-9",
) -> str:
    """Call ``tool`` with its probe down so it ends uncertain; return its operation id.

    ``capture`` ends QUARANTINED, ``capture_later`` OUTCOME_UNKNOWN, ``refund``
    (no probe) QUARANTINED. The request reached the provider (``committed``) or not.
    """
    module = site.module()
    site.probe_down(True)
    try:
        fault = Fault.LOSE_ACK if committed else Fault.FAIL_BEFORE_COMMIT
        module.provider.faults = FaultPlan([fault])
        with use_executor(EffectExecutor(ledger)):
            outcome = getattr(module, tool).execute(invoice, 1250)
        expected = (
            EffectStatus.OUTCOME_UNKNOWN if tool == "capture_later" else EffectStatus.QUARANTINED
        )
        assert outcome.status is expected, outcome
        return outcome.operation_id
    finally:
        module.provider.faults = FaultPlan()
        site.probe_down(False)
