"""The JSON-schema subset the runtime validates, and the schemas it refuses to half-validate."""

from __future__ import annotations

import pytest

from effectguard import ConfigurationError
from effectguard.runtime.tools.validation import check_schema, parse_arguments, validate


@pytest.mark.parametrize(
    ("schema", "good", "bad", "problem"),
    [
        ({"type": "integer"}, 3, True, "expected integer, got boolean"),
        ({"type": "number"}, 2, "2", "expected number, got string"),
        ({"type": ["string", "null"]}, None, 1, "expected string or null"),
        ({"const": 1}, 1, True, "must be 1"),
        ({"enum": ["a", 1]}, 1, 1.5, 'must be one of "a", 1'),
        ({"type": "string", "minLength": 2}, "ab", "a", "shorter than 2"),
        ({"type": "string", "maxLength": 1}, "a", "ab", "longer than 1"),
        ({"type": "string", "pattern": "^INV-"}, "INV-1", "X", "does not match"),
        ({"minimum": 1}, 1, 0, "less than 1"),
        ({"maximum": 1}, 1, 2, "greater than 1"),
        ({"exclusiveMinimum": 0}, 1, 0, "not greater than 0"),
        ({"exclusiveMaximum": 1}, 0, 1, "not less than 1"),
        ({"type": "array", "maxItems": 1}, [1], [1, 2], "more than 1 items"),
        ({"type": "array", "items": {"type": "string"}}, ["a"], ["a", 2], "arguments[1]"),
        ({"allOf": [{"minimum": 0}, {"maximum": 5}]}, 3, 9, "greater than 5"),
        ({"oneOf": [{"type": "integer"}, {"minimum": 0}]}, -1, 1, "exactly one"),
        ({"anyOf": [{"type": "integer"}, {"type": "null"}]}, None, "x", "matches none"),
        ({"type": "object", "required": ["a"]}, {"a": 1}, {}, "missing required 'a'"),
        (
            {"type": "object", "additionalProperties": {"type": "integer"}},
            {"a": 1},
            {"a": "x"},
            "arguments.a: expected integer",
        ),
        (False, None, 1, "not allowed"),
    ],
)
def test_each_supported_keyword_is_enforced(schema, good, bad, problem):
    """Every keyword of the subset accepts what it allows and names what it refuses."""
    check_schema(schema, "test")
    if schema is not False:
        assert validate(good, schema) == []
    problems = validate(bad, schema)
    assert any(problem in line for line in problems), problems


def test_non_finite_numbers_are_not_json_numbers():
    """NaN and infinity are refused where a number is expected."""
    assert validate(float("nan"), {"type": "number"}) != []
    assert validate(float("inf"), {"type": "number"}) != []


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ({"type": "object", "properties": {"a": {"$ref": "#/defs/a"}}}, r"\$ref"),
        ({"if": {}, "then": {}}, "if, then"),
        ({"type": "date"}, "unknown type 'date'"),
        ({"type": "string", "pattern": "("}, "not a regular expression"),
        ({"properties": {"a": 3}}, "a schema is a JSON object"),
    ],
)
def test_unsupported_schemas_are_refused_when_the_tool_is_defined(schema, problem):
    """A schema the validator cannot fully enforce is a ConfigurationError, not a weaker check."""
    with pytest.raises(ConfigurationError, match=problem):
        check_schema(schema, "tool x")


def test_arguments_may_be_json_text():
    """JSON text is parsed; malformed text or a non-object is a problem, not an exception."""
    assert parse_arguments('{"a": 1}') == ({"a": 1}, "")
    assert parse_arguments("{")[0] is None
    assert "JSON object" in parse_arguments("3")[1]
    assert parse_arguments({"a": 1}) == ({"a": 1}, "")


def test_problems_are_capped():
    """A wildly wrong call gets at most ten problems back."""
    schema = {"type": "object", "additionalProperties": False}
    assert len(validate({str(n): n for n in range(50)}, schema)) == 10
