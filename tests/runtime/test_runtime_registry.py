"""Which tools a runtime offers: discovered, decorated, plain or defined, each with its contract."""

from __future__ import annotations

import pytest
import runtime_tools_module
from runtime_support import OPERATION, RUN, Payments, capture_tool, script

from effectguard import ConfigurationError, EffectStatus, effect, get_contract
from effectguard.runtime import AgentRuntime, RunState, ToolDefinition, ToolRegistry
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan


def test_a_tool_discovered_from_a_module_keeps_its_contract(executor, monkeypatch):
    """discover(module) finds each decorated function once, keeping its contract."""
    provider = FakePaymentProvider(faults=FaultPlan({1: Fault.LOSE_ACK}))
    monkeypatch.setattr(runtime_tools_module, "PROVIDER", provider)
    registry = ToolRegistry.discover(runtime_tools_module)
    assert registry.names() == ["capture_payment", "refund_payment"]
    capture = registry.get("capture_payment")
    assert capture.contract is get_contract(runtime_tools_module.capture_payment)
    assert capture.contract.name == "module.capture"
    assert capture.contract.provider_idempotency_guaranteed
    assert registry.get("refund_payment").contract.name == "module.refund"

    result = AgentRuntime(script(), registry, executor).start(RUN, "pay")
    assert result.state is RunState.COMPLETED
    record = executor.ledger.get(OPERATION)
    assert record.contract == "module.capture"
    assert record.provider_key == "capture:INV-1042"
    assert provider.committed() == 1  # the lost ack was reconciled by the module's probe


def test_tools_discovered_on_an_object_are_bound_with_their_method_probe(executor):
    """discover(obj) binds decorated methods to obj, and their probe runs on the same instance."""
    provider = FakePaymentProvider(faults=FaultPlan({1: Fault.LOSE_ACK}))
    registry = ToolRegistry.discover(Payments(provider))
    assert registry.names() == ["capture_payment"]  # lookup_invoice is not decorated
    definition = registry.get("capture_payment")
    assert "self" not in definition.parameters["properties"]
    result = AgentRuntime(script(), registry, executor).start(RUN, "pay")
    assert result.effects == {OPERATION: EffectStatus.CONFIRMED}
    assert provider.committed() == 1
    assert provider.lookups == 1


def test_discovering_on_a_class_finds_only_static_and_class_methods():
    """Instance methods need an instance; a class contributes its static and class methods."""

    class Tools:
        @effect(operation_id="a:{x}")
        def needs_self(self, x: int) -> int:
            """Needs an instance."""
            return x

        @staticmethod
        @effect(operation_id="b:{x}")
        def standalone(x: int) -> int:
            """Needs nothing."""
            return x

    assert ToolRegistry.discover(Tools).names() == ["standalone"]
    assert ToolRegistry.discover(Tools()).names() == ["needs_self", "standalone"]


def test_a_runtime_takes_decorated_plain_and_defined_tools(executor, provider):
    """tools= mixes decorated functions, plain functions and ToolDefinitions."""

    def lookup_invoice(invoice_id: str) -> str:
        """Read an invoice."""
        return "open"

    def audit_log(arguments: dict) -> str:
        return "logged"

    defined = ToolDefinition("audit_log", "Log it.", {"type": "object"}, audit_log)
    runtime = AgentRuntime(script(), [capture_tool(provider), lookup_invoice, defined], executor)
    tools = {tool.name: tool for tool in runtime.tools}
    assert tools["capture_payment"].contract.name == "tests.capture"
    assert tools["capture_payment"].decorated
    assert tools["lookup_invoice"].read_only
    assert tools["audit_log"].read_only


def test_tool_names_must_be_unique(provider):
    """Two tools of one name are refused, naming it."""
    with pytest.raises(ConfigurationError, match="two tools are named 'capture_payment'"):
        ToolRegistry([capture_tool(provider), capture_tool(provider)])
    renamed = ToolDefinition.from_function(capture_tool(provider), name="capture_again")
    assert ToolRegistry([capture_tool(provider), renamed]).names() == [
        "capture_payment",
        "capture_again",
    ]


def test_modules_and_classes_are_not_tools():
    """Passing a module as a tool points at ToolRegistry.discover."""
    with pytest.raises(ConfigurationError, match=r"ToolRegistry\.discover"):
        ToolRegistry([runtime_tools_module])


def test_a_decorated_handler_cannot_be_given_another_contract(provider):
    """A ToolDefinition of a decorated tool takes its contract; a different one is refused."""
    tool = capture_tool(provider)
    other = get_contract(capture_tool(provider))
    schema = ToolDefinition.from_function(tool).parameters
    same = ToolDefinition("pay", "Pay.", schema, tool)
    assert same.contract is get_contract(tool)
    with pytest.raises(ConfigurationError, match="its own contract"):
        ToolDefinition("pay", "Pay.", schema, tool, contract=other)


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"name": "has space"}, "letters, digits"),
        ({"parameters": {"type": "array"}}, '"type": "object"'),
        (
            {"parameters": {"type": "object", "$ref": "#/x"}},
            r"unsupported JSON-schema keyword \$ref",
        ),
        (
            {"parameters": {"type": "object", "properties": {"idempotency_key": {}}}},
            "must not include 'idempotency_key'",
        ),
        ({"handler": 3}, "must be callable"),
    ],
)
def test_a_bad_tool_definition_is_refused(changes, problem):
    """A ToolDefinition with a bad name, schema or handler is a ConfigurationError at once."""
    fields = {
        "name": "tool",
        "description": "A tool.",
        "parameters": {"type": "object"},
        "handler": lambda: None,
    }
    fields.update(changes)
    with pytest.raises(ConfigurationError, match=problem):
        ToolDefinition(**fields)


def test_a_plain_function_taking_a_key_must_be_decorated():
    """A plain tool cannot take idempotency_key, required or not: only @effect tools get one."""

    def send(to: str, *, idempotency_key: str) -> None:
        """Send."""

    def notify(to: str, *, idempotency_key: str | None = None) -> None:
        """Notify; a defaulted key would never be a stable one."""

    for func in (send, notify):
        with pytest.raises(ConfigurationError, match="takes idempotency_key but is not an @eff"):
            ToolDefinition.from_function(func)


def test_an_unbound_method_is_refused_with_the_way_to_bind_it(provider):
    """Payments.capture_payment (no instance) is not a tool; obj.capture_payment is."""
    with pytest.raises(ConfigurationError, match=r"obj\.method"):
        ToolRegistry([Payments.capture_payment])
    assert ToolRegistry([Payments(provider).capture_payment]).names() == ["capture_payment"]
