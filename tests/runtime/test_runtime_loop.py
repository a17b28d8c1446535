"""The run loop: argument checks, unknown tools, plain-tool errors, max_steps, scripts, run ids."""

from __future__ import annotations

import json

import pytest
from runtime_support import (
    ARGUMENTS,
    CAPTURE,
    OPERATION,
    RUN,
    RecordingModel,
    capture_tool,
    script,
    tool_messages,
)

from effectguard import InvalidRequestError
from effectguard.runtime import (
    AgentRuntime,
    AuditAction,
    ModelTurn,
    RunExistsError,
    RunNotFoundError,
    RunState,
    ScriptedModel,
    ScriptExhaustedError,
    ToolCall,
    TraceKind,
)


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"invoice_id": "INV-1042"}, "missing required 'amount_cents'"),
        ({"invoice_id": "INV-1042", "amount_cents": "1999"}, "expected integer, got string"),
        ({"invoice_id": "INV-1042", "amount_cents": 19.99}, "expected integer, got number"),
        ({**ARGUMENTS, "idempotency_key": "mine"}, "unexpected 'idempotency_key'"),
        ('{"invoice_id": "INV-1042", ', "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
    ],
)
def test_invalid_arguments_never_dispatch(
    executor, provider, checkpoints, trace, audit, arguments, problem
):
    """Arguments that do not match the schema go back to the model; nothing is sent or recorded."""
    policy_calls = []

    def policy(request):
        policy_calls.append(request)
        raise AssertionError

    call = ToolCall("call-1", "capture_payment", arguments)
    runtime = AgentRuntime(
        script(call, "could not pay"),
        [capture_tool(provider)],
        executor,
        permission_policy=policy,
        checkpoints=checkpoints,
        trace=trace,
        audit=audit,
    )
    assert runtime.start(RUN, "pay").state is RunState.COMPLETED
    assert provider.requests == 0
    assert executor.ledger.get(OPERATION) is None
    assert policy_calls == []
    [message] = tool_messages(checkpoints.load(RUN).messages)
    error = json.loads(message["content"])["error"]
    assert error["kind"] == "invalid_arguments"
    assert any(problem in line for line in error["problems"])
    [invalid] = audit.of(RUN, AuditAction.ARGUMENTS_INVALID)
    assert invalid.details["problems"] == error["problems"]
    assert len(trace.of(RUN, TraceKind.ARGUMENTS_INVALID)) == 1
    assert trace.of(RUN, TraceKind.DISPATCH) == []


def test_an_unknown_tool_is_reported_to_the_model(executor, checkpoints):
    """A call of a tool the runtime lacks is an error message naming the tools it has."""

    def lookup_invoice(invoice_id: str) -> str:
        """Read an invoice."""
        return "open"

    call = ToolCall("call-1", "refund", {})
    runtime = AgentRuntime(script(call, "ok"), [lookup_invoice], executor, checkpoints=checkpoints)
    assert runtime.start(RUN, "go").state is RunState.COMPLETED
    [message] = tool_messages(checkpoints.load(RUN).messages)
    error = json.loads(message["content"])["error"]
    assert error["kind"] == "unknown_tool"
    assert "lookup_invoice" in error["message"]


def test_a_plain_tool_error_goes_back_to_the_model(executor, checkpoints):
    """A read-only tool's exception becomes an error message, and the model carries on."""

    def lookup_invoice(invoice_id: str) -> str:
        """Read an invoice."""
        msg = f"no invoice {invoice_id}"
        raise KeyError(msg)

    call = ToolCall("call-1", "lookup_invoice", {"invoice_id": "X"})
    model = RecordingModel([call, "there is no such invoice"])
    runtime = AgentRuntime(model, [lookup_invoice], executor, checkpoints=checkpoints)
    result = runtime.start(RUN, "look X up")
    assert result.state is RunState.COMPLETED
    tool_message = model.seen[1][-1]
    assert tool_message["role"] == "tool"
    assert tool_message["is_error"] is True
    error = json.loads(tool_message["content"])["error"]
    assert error == {"kind": "tool_error", "message": "'no invoice X'", "type": "KeyError"}


def test_plain_tool_outputs_reach_the_model_as_text_or_json(executor):
    """A string output is passed as is; anything else as JSON."""

    def greeting(name: str) -> str:
        """Say hello."""
        return f"hello {name}"

    def totals(invoice_ids: list[str]) -> dict[str, int]:
        """Sum invoices."""
        return dict.fromkeys(invoice_ids, 5)

    calls = [
        ToolCall("a", "greeting", {"name": "ada"}),
        ToolCall("b", "totals", {"invoice_ids": ["x", "y"]}),
    ]
    model = RecordingModel([calls, "ok"])
    AgentRuntime(model, [greeting, totals], executor).start(RUN, "go")
    first, second = tool_messages(model.seen[1])
    assert first["content"] == "hello ada"
    assert json.loads(second["content"]) == {"x": 5, "y": 5}
    assert model.tools[0] == ["greeting", "totals"]


def test_max_steps_fails_a_run_that_never_answers(executor, trace):
    """A model that keeps calling tools is stopped after max_steps turns, as FAILED."""

    def ping() -> str:
        """Ping."""
        return "pong"

    calls = [ToolCall(f"call-{n}", "ping", {}) for n in range(5)]
    runtime = AgentRuntime(ScriptedModel(calls), [ping], executor, trace=trace, max_steps=3)
    result = runtime.start(RUN, "go")
    assert result.state is RunState.FAILED
    assert result.steps == 3
    assert result.final is None
    assert "max_steps (3)" in result.error
    assert len(trace.of(RUN, TraceKind.RUN_FAILED)) == 1
    assert runtime.resume(RUN) == result  # a failed run is finished


def test_a_model_error_is_raised_and_the_run_stays_resumable(executor, provider, checkpoints):
    """A model API failure is raised to the caller; resume continues from the checkpoint."""

    class Flaky:
        def __init__(self) -> None:
            self.script = script()
            self.fail = True

        def next_turn(self, messages, tools):
            if self.fail and len(messages) > 1:
                msg = "model API unavailable"
                raise ConnectionError(msg)
            return self.script.next_turn(messages, tools)

    model = Flaky()
    runtime = AgentRuntime(model, [capture_tool(provider)], executor, checkpoints=checkpoints)
    with pytest.raises(ConnectionError):
        runtime.start(RUN, "pay")
    assert checkpoints.load(RUN).state is RunState.RUNNING
    model.fail = False
    result = runtime.resume(RUN)
    assert result.state is RunState.COMPLETED
    assert provider.requests == 1


def test_the_script_position_comes_from_the_conversation(executor, provider):
    """ScriptedModel plays the turn after the assistant messages so far, whatever it played."""
    model = script()
    turns = [model.next_turn([{"role": "user", "content": "x"}], []) for _ in range(2)]
    assert turns[0] == turns[1] == ModelTurn(tool_calls=[CAPTURE])
    later = model.next_turn([{"role": "assistant", "content": None}], [])
    assert later.final == "payment done"
    with pytest.raises(ScriptExhaustedError, match="add a final turn"):
        model.next_turn([{"role": "assistant"}] * 2, [])


def test_an_exhausted_script_is_an_error_not_a_completion(executor):
    """A script without a final turn raises rather than inventing an answer."""

    def ping() -> str:
        """Ping."""
        return "pong"

    runtime = AgentRuntime(ScriptedModel([ToolCall("c", "ping", {})]), [ping], executor)
    with pytest.raises(ScriptExhaustedError):
        runtime.start(RUN, "go")
    assert runtime.result(RUN).state is RunState.RUNNING


def test_run_ids_are_checked(executor, provider):
    """start() refuses a run id in use or blank; resume() of an unknown run is RunNotFoundError."""
    runtime = AgentRuntime(script(), [capture_tool(provider)], executor)
    completed = runtime.start(RUN, "pay")
    with pytest.raises(RunExistsError, match="already exists"):
        runtime.start(RUN, "pay again")
    with pytest.raises(InvalidRequestError):
        runtime.start("", "pay")
    with pytest.raises(RunNotFoundError, match="no run 'nope'"):
        runtime.resume("nope")
    assert runtime.resume(RUN) == completed
    assert provider.requests == 1


def test_a_run_can_start_from_several_messages(executor):
    """start() takes starting messages (a system prompt and a user message) as well as a string."""
    model = RecordingModel(["hi"])
    runtime = AgentRuntime(model, [], executor)
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]
    assert runtime.start(RUN, messages).final == "hi"
    assert model.seen[0] == messages


def test_model_turns_are_well_formed():
    """A turn holds tool calls or a final text, not both, and call ids are unique in a turn."""
    with pytest.raises(ValueError, match="exactly one"):
        ModelTurn(tool_calls=[CAPTURE], final="done")
    with pytest.raises(ValueError, match="exactly one"):
        ModelTurn()
    with pytest.raises(ValueError, match="unique"):
        ModelTurn(tool_calls=[CAPTURE, CAPTURE])
    with pytest.raises(ValueError, match="non-empty"):
        ToolCall("", "capture_payment", {})


def test_a_runtime_needs_a_model_an_executor_and_a_step_limit(executor):
    """Constructor arguments of the wrong kind are refused at once."""
    with pytest.raises(TypeError, match="next_turn"):
        AgentRuntime(object(), [], executor)
    with pytest.raises(TypeError, match="EffectExecutor"):
        AgentRuntime(script(), [], object())
    with pytest.raises(ValueError, match="max_steps"):
        AgentRuntime(script(), [], executor, max_steps=0)
