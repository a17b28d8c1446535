"""JSON-schema parameters from type hints and Google-style docstrings, and their validation."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, TypedDict

import pytest

from effectguard import INJECTED, ConfigurationError, effect
from effectguard.runtime import ToolDefinition, parse_docstring
from effectguard.runtime.tools.validation import validate


class Priority(enum.StrEnum):
    """How urgent a ticket is."""

    LOW = "low"
    HIGH = "high"


class Address(TypedDict):
    """A postal address."""

    street: str
    zip: str


@effect(operation_id="ticket:{title}")
def open_ticket(
    title: str,
    body: Annotated[str, "Markdown text of the ticket."],
    priority: Priority = Priority.LOW,
    labels: list[str] | None = None,
    estimate: float = 1.5,
    assignee: Literal["ada", "bob"] | None = None,
    size: tuple[int, int] = (1, 1),
    extra: Mapping[str, int] = {},
    address: Address | None = None,
    *,
    idempotency_key: str = INJECTED,
) -> dict:
    """Open a support ticket.

    The ticket is visible to the customer.

    Args:
        title: A one-line summary.
        body: Ignored here; the Annotated text wins.
        priority (Priority): How urgent it is.
        labels: Labels to put on the ticket, for
            filtering later.
        estimate: Hours.
        assignee: Who takes it.
        size: Width and height.
        extra: Anything else.
        address: Where to send things.
        idempotency_key: Never shown to a model.

    Returns:
        The ticket.
    """
    return {}


def test_the_schema_comes_from_type_hints_and_the_docstring():
    """Hints give types, the docstring gives descriptions, defaults make parameters optional."""
    tool = ToolDefinition.from_function(open_ticket)
    assert tool.name == "open_ticket"
    assert tool.description == "Open a support ticket.\n\nThe ticket is visible to the customer."
    schema = tool.parameters
    assert schema["type"] == "object"
    assert schema["required"] == ["title", "body"]
    assert schema["additionalProperties"] is False
    properties = schema["properties"]
    assert properties["title"] == {"type": "string", "description": "A one-line summary."}
    assert properties["body"] == {"type": "string", "description": "Markdown text of the ticket."}
    assert properties["priority"] == {
        "enum": ["low", "high"],
        "type": "string",
        "description": "How urgent it is.",
        "default": "low",
    }
    assert properties["labels"] == {
        "anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}],
        "description": "Labels to put on the ticket, for filtering later.",
        "default": None,
    }
    assert properties["estimate"] == {"type": "number", "description": "Hours.", "default": 1.5}
    assert properties["assignee"]["anyOf"][0] == {"enum": ["ada", "bob"], "type": "string"}
    assert properties["size"] == {
        "type": "array",
        "prefixItems": [{"type": "integer"}, {"type": "integer"}],
        "minItems": 2,
        "maxItems": 2,
        "description": "Width and height.",
    }
    assert properties["extra"] == {
        "type": "object",
        "additionalProperties": {"type": "integer"},
        "description": "Anything else.",
    }
    assert properties["address"]["anyOf"][0]["required"] == ["street", "zip"]


def test_idempotency_key_is_never_exposed_to_the_model():
    """The executor's parameter is neither a property nor required."""
    parameters = ToolDefinition.from_function(open_ticket).parameters
    assert "idempotency_key" not in parameters["properties"]
    assert "idempotency_key" not in parameters["required"]
    assert "idempotency_key" not in str(ToolDefinition.from_function(open_ticket).spec())


def test_the_generated_schema_validates_what_it_describes():
    """Valid arguments pass; each kind of mistake is named with its path."""
    schema = ToolDefinition.from_function(open_ticket).parameters
    assert validate({"title": "t", "body": "b"}, schema) == []
    assert validate({"title": "t", "body": "b", "labels": ["x"], "size": [1, 2]}, schema) == []
    problems = validate(
        {
            "title": 3,
            "body": "b",
            "priority": "urgent",
            "labels": [1],
            "size": [1],
            "assignee": "eve",
            "extra": {"a": True},
            "surprise": 1,
        },
        schema,
    )
    assert "arguments.title: expected string, got integer" in problems
    assert 'arguments.priority: must be one of "low", "high"' in problems
    assert any(p.startswith("arguments.labels: matches none") for p in problems)
    assert "arguments.size: fewer than 2 items" in problems
    assert any(p.startswith("arguments.assignee") for p in problems)
    assert "arguments.extra.a: expected integer, got boolean" in problems
    assert "arguments: unexpected 'surprise'" in problems


def test_a_function_without_hints_accepts_any_json():
    """An unannotated parameter is described as any JSON value, still required."""

    def echo(value, times=2):
        """Echo."""
        return value

    parameters = ToolDefinition.from_function(echo).parameters
    assert parameters["properties"] == {"value": {}, "times": {"default": 2}}
    assert parameters["required"] == ["value"]


def test_kwargs_allow_extra_properties_and_args_are_refused():
    """**kwargs opens the object to extra names; *args has no JSON form and is refused."""

    def open_ended(name: str, **more: Any) -> None:
        """Take anything."""

    def positional(*names: str) -> None:
        """Take names."""

    assert ToolDefinition.from_function(open_ended).parameters["additionalProperties"] is True
    with pytest.raises(ConfigurationError, match=r"cannot take \*names"):
        ToolDefinition.from_function(positional)


@pytest.mark.parametrize(
    "hint",
    [object.__class__, dict[int, str], Sequence[bytes]],
)
def test_types_without_a_json_form_are_refused_naming_the_parameter(hint):
    """A hint the schema cannot express is a ConfigurationError naming the tool and parameter."""

    def tool(value):  # annotated below, so each hint is tested on the same function
        """A tool."""

    tool.__annotations__ = {"value": hint}
    with pytest.raises(ConfigurationError, match="tool tool, parameter value"):
        ToolDefinition.from_function(tool)


def test_google_docstrings_are_parsed():
    """Summary up to the first section; Args entries with types and continuation lines."""
    description, arguments = parse_docstring(
        """Send an email.

        Args:
            to (str): The recipient.
            subject: The subject line,
                kept short.
            *attachments: Files.

        Raises:
            ValueError: never listed as an argument.
        """
    )
    assert description == "Send an email."
    assert arguments == {
        "to": "The recipient.",
        "subject": "The subject line, kept short.",
        "attachments": "Files.",
    }
    assert parse_docstring(None) == ("", {})


def test_positional_only_parameters_are_passed_by_position(executor):
    """A plain tool with positional-only parameters is still called correctly from JSON."""
    from runtime_support import RecordingModel  # noqa: PLC0415 - used by this test only

    from effectguard.runtime import AgentRuntime, ToolCall  # noqa: PLC0415 - used by this test only

    def power(base: int, exponent: int = 2, /) -> int:
        """Raise a number."""
        return base**exponent

    model = RecordingModel([ToolCall("c", "power", {"base": 3}), "done"])
    AgentRuntime(model, [power], executor).start("r", "go")
    assert model.seen[1][-1]["content"] == "9"
