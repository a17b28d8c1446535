"""mypy sees through @effect: parameters, return types and execute() survive decoration."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mypy import api

SAMPLE = Path(__file__).parents[1] / "typing" / "decorated_tools.py"
_OUTPUT = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+): (?P<kind>error|note): (?P<text>.*)$")
_ERROR_CODE = re.compile(r"\[(?P<code>[a-z-]+)\]$")
_MARKER = re.compile(r"  # (?P<kind>[RE]): (?P<text>.+?)\s*$")
_REVEALED = re.compile(r'^Revealed type is "(?P<type>.*)"$')


def _expectations() -> tuple[dict[int, str], dict[int, str]]:
    reveals: dict[int, str] = {}
    errors: dict[int, str] = {}
    for number, line in enumerate(SAMPLE.read_text().splitlines(), start=1):
        marker = _MARKER.search(line)
        if marker and marker["kind"] == "R":
            reveals[number] = marker["text"]
        elif marker:
            errors[number] = marker["text"]
    return reveals, errors


@pytest.fixture(scope="module")
def mypy_output() -> tuple[dict[int, str], dict[int, list[str]]]:
    """Run mypy --strict over the sample once; return revealed types and error codes by line."""
    stdout, stderr, _ = api.run(
        [str(SAMPLE), "--strict", "--show-error-codes", "--no-error-summary", "--no-pretty"]
    )
    assert not stderr, stderr
    reveals: dict[int, str] = {}
    errors: dict[int, list[str]] = {}
    for line in stdout.splitlines():
        match = _OUTPUT.match(line)
        assert match, f"unexpected mypy output: {line}"
        if Path(match["path"]).name != SAMPLE.name:
            if match["kind"] == "note":
                continue  # context for an error in the sample (older mypy points at the definition)
            pytest.fail(f"mypy reports a problem outside the sample: {line}")
        number = int(match["line"])
        if match["kind"] == "note":
            revealed = _REVEALED.match(match["text"])
            if revealed:
                reveals[number] = revealed["type"]
            continue
        code = _ERROR_CODE.search(match["text"])
        errors.setdefault(number, []).append(code["code"] if code else match["text"])
    return reveals, errors


def test_revealed_types_survive_decoration(mypy_output):
    """Calls, execute() and bound methods reveal the original return types."""
    reveals, _ = mypy_output
    expected, _ = _expectations()
    assert expected
    assert {line: reveals.get(line) for line in expected} == expected


def test_wrong_calls_are_errors_and_nothing_else_is(mypy_output):
    """Each wrong call in the sample is a mypy error of the expected kind; no other line errs."""
    _, errors = mypy_output
    _, expected = _expectations()
    assert expected
    assert errors == {line: [code] for line, code in expected.items()}
