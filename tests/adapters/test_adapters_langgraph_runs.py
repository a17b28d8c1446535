"""``agent-effect-ops runs`` for framework runs: a LangGraph thread's effects, found in the ledger.

The ledger keeps no call scope beside an operation; the scope lives in the
ids ``call_scoped(prefix)`` and ``{run_id}`` templates make, which the tools
(``--tools``) say how to read. Two real LangGraph threads, one paused on a
lost acknowledgement, are listed by thread id with their operations; counts
at the fake providers show listing and resuming send nothing extra.
"""

from __future__ import annotations

import json
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from extras_support import import_extra

langgraph = import_extra("langgraph", "langgraph")

from langgraph.checkpoint.memory import InMemorySaver
from lg_world import FINAL, World, calls, mail, pay, start_message

from effectguard import EffectExecutor, EffectStatus, call_scope, open_ledger
from effectguard.adapters.langgraph import resume_command
from effectguard.cli.ops import main as ops
from effectguard.operator import framework_runs, load_tools
from effectguard.operator._runs import scope_parser
from effectguard.testkit import FakeEmailProvider, FakePaymentProvider, Fault, FaultPlan

TOOLS = '''
from effectguard import EffectExecutor, call_scoped, effect, open_ledger
from effectguard.testkit import FakeEmailProvider, FakePaymentProvider, Lookup

payments = FakePaymentProvider(
    idempotency_guaranteed=False, lookup=Lookup.NONE, path={payments!r}
)
mailer = FakeEmailProvider(path={mail!r})
executor = EffectExecutor(open_ledger({ledger!r}))


@effect(operation_id=call_scoped("capture"), executor=executor)
def capture_payment(invoice_id: str, amount_cents: int, *, idempotency_key: str) -> dict:
    """Capture a card payment for an invoice."""
    return payments.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)


@effect(operation_id="receipt:{{to}}", executor=executor)
def send_receipt(to: str, *, idempotency_key: str) -> dict:
    """Email the customer their receipt."""
    message_id = FakeEmailProvider.message_id_for(idempotency_key)
    return mailer.send(to, "Your receipt", "Thank you.", message_id=message_id)


@effect(operation_id="refund:{{run_id}}:{{order_id}}", executor=executor)
def refund(order_id: str, *, idempotency_key: str) -> dict:
    """Refund an order."""
    return payments.capture(order_id, -100, idempotency_key=idempotency_key)
'''

AUDIT = ["--actor", "oncall", "--reason", "seen at the provider", "--evidence-reference", "T-33"]


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A tools module (importable by --tools) over provider and ledger files in tmp_path."""
    name = f"scoped_tools_{uuid.uuid4().hex}"
    text = TOOLS.format(
        payments=str(tmp_path / "payments.db"),
        mail=str(tmp_path / "mail.db"),
        ledger=str(tmp_path / "ledger.db"),
    )
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(text), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = __import__(name)
    yield module
    module.executor.ledger.close()
    sys.modules.pop(name, None)


def world(module: Any) -> World:
    return World(
        module.payments,
        module.mailer,
        module.executor,
        module.capture_payment,
        module.send_receipt,
        is_async=False,
    )


def cli(module: Any, *command: str, code: int = 0) -> Any:
    db = str(module.executor.ledger.path)
    done = CliRunner().invoke(ops, ["--db", db, *command])
    assert done.exit_code == code, done.output
    return done


def test_runs_lists_langgraph_threads_by_their_scope_and_shows_each_ones_operations(shop):
    """Paused thread A and finished thread B, each with its operations; a receipt is in none."""
    graphs = {}
    shop.payments.faults = FaultPlan([Fault.LOSE_ACK])
    graphs["A"] = world(shop).graph([calls(pay("call_pay_a", "INV-1"))], InMemorySaver())
    paused = graphs["A"].invoke(start_message(), {"configurable": {"thread_id": "thread-A"}})
    assert paused["__interrupt__"]
    shop.payments.faults = FaultPlan()
    graphs["B"] = world(shop).graph([calls(pay("call_pay_b", "INV-2"), mail())], InMemorySaver())
    done = graphs["B"].invoke(start_message(), {"configurable": {"thread_id": "thread-B"}})
    assert done["messages"][-1].content == FINAL
    with call_scope(run_id="thread-A", call_id="call_r"):
        shop.refund("O-1")
    counted = (shop.payments.committed(), shop.mailer.committed())
    assert counted == (3, 1)
    tools = ["--tools", shop.__name__]

    listed = json.loads(cli(shop, "runs", "list", *tools, "--json").output)

    assert [(r["run_id"], r["counts"], r["needs_attention"]) for r in listed] == [
        ("thread-A", {"CONFIRMED": 1, "QUARANTINED": 1}, True),
        ("thread-B", {"CONFIRMED": 1}, False),
    ]
    a = {op["operation_id"]: op for op in listed[0]["operations"]}
    assert a["capture:thread-A:call_pay_a"]["call_id"] == "call_pay_a"
    assert a["capture:thread-A:call_pay_a"]["blocks"] is True
    assert a["refund:thread-A:O-1"]["call_id"] is None  # the template names no call id
    assert all("receipt" not in op["operation_id"] for r in listed for op in r["operations"])
    table = cli(shop, "runs", "list", *tools).output
    assert "thread-A  2           CONFIRMED 1, QUARANTINED 1  yes" in table
    shown = cli(shop, "runs", "show", "thread-A", *tools).output
    assert "capture:thread-A:call_pay_a is QUARANTINED: resolve it" in shown

    found = shop.payments.find_capture("capture:thread-A:call_pay_a")
    assert found is not None
    confirm = ["confirm", "capture:thread-A:call_pay_a", "--output-json", json.dumps(found)]
    cli(shop, *confirm, "--provider-operation-id", found["id"], *AUDIT)
    again = json.loads(cli(shop, "runs", "show", "thread-A", *tools, "--json").output)
    assert again["needs_attention"] is False
    config = {"configurable": {"thread_id": "thread-A"}}
    resumed = graphs["A"].invoke(resume_command(graphs["A"], config), config)
    assert resumed["messages"][-1].content == FINAL
    assert (shop.payments.committed(), shop.mailer.committed()) == counted
    assert shop.payments.attempts() == 3


def test_runs_without_checkpoints_or_tools_and_an_unknown_run_are_one_line_errors(shop):
    """No --tools: says what to name. An unknown run: exit 1 naming it. Nothing is written."""
    with call_scope(run_id="thread-A", call_id="call_r"):
        shop.refund("O-1")
    done = cli(shop, "runs", "list", code=1)
    assert "--checkpoints PATH" in done.output
    assert "--tools MODULE" in done.output
    done = cli(shop, "runs", "show", "thread-nope", "--tools", shop.__name__, code=1)
    assert "no operation in the ledger belongs to run 'thread-nope'" in done.output
    assert [op.operation_id for op in shop.executor.ledger.list_operations()] == [
        "refund:thread-A:O-1"
    ]
    assert shop.payments.committed() == 1


def test_scope_parsers_read_call_scoped_ids_and_run_id_templates_only():
    """call_scoped splits at the last colon; templates by their literals; business keys: none."""
    from effectguard import call_scoped  # noqa: PLC0415 - beside its only use
    from effectguard._decorator import IdentityTemplate  # noqa: PLC0415 - as above

    scoped = scope_parser(call_scoped("capture"))
    assert scoped is not None
    assert scoped("capture:thread:1/sub:call_9") == ("thread:1/sub", "call_9")
    assert scoped("capture:nocall") is None
    assert scoped("refund:t:c") is None
    templated = scope_parser(
        IdentityTemplate("r:{order}:{run_id}/{call_id}", "id", ["run_id", "call_id"])
    )
    assert templated is not None
    assert templated("r:O-1:conv-7/call_2") == ("conv-7", "call_2")
    assert templated("x:O-1:conv-7/call_2") is None
    assert scope_parser(IdentityTemplate("invoice:{invoice_id}", "id")) is None
    assert scope_parser(lambda arguments: "x") is None


def test_framework_runs_reads_each_scoped_contract_of_the_index(tmp_path):
    """The API the CLI formats: runs of both tools under one scope, grouped together."""
    from effectguard import call_scoped, effect  # noqa: PLC0415 - beside its only use

    executor = EffectExecutor(open_ledger(str(tmp_path / "ledger.db")))
    payments = FakePaymentProvider(path=tmp_path / "p.db")
    mailer = FakeEmailProvider(path=tmp_path / "m.db")

    @effect(operation_id=call_scoped("pay"), executor=executor)
    def pay_it(invoice_id: str, *, idempotency_key: str) -> dict:
        """Pay."""
        return payments.capture(invoice_id, 100, idempotency_key=idempotency_key)

    @effect(operation_id=call_scoped("mail"), executor=executor)
    def mail_it(to: str, *, idempotency_key: str) -> dict:
        """Mail."""
        return mailer.send(
            to, "s", "b", message_id=FakeEmailProvider.message_id_for(idempotency_key)
        )

    for run, call in (("conv-1", "c1"), ("conv-1", "c2"), ("openai-agents", "call_x")):
        with call_scope(run_id=run, call_id=call):
            pay_it("INV-1")
            mail_it("ada@example.com")

    found = framework_runs(executor.ledger, load_tools([pay_it, mail_it]))

    assert sorted((r.run_id, len(r.operations)) for r in found) == [
        ("conv-1", 4),
        ("openai-agents", 2),
    ]
    assert all(op.status is EffectStatus.CONFIRMED for r in found for op in r.operations)
    assert (payments.committed(), mailer.committed()) == (3, 3)
    executor.ledger.close()
