"""Resolutions checked before they are written: output types with --tools, --dry-run everywhere."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Literal, TypedDict

import pytest
from ops_helpers import protocol_snapshot
from recovery_support import AUDIT, OP, Site, leave_uncertain, make_site

from effectguard import EffectStatus, open_ledger
from effectguard.operator import output_problem

CONFIRM = ("confirm", OP, "--provider-operation-id", "cap_000001", *AUDIT)


@pytest.fixture
def site(tmp_path: Path, ledger_target: str) -> Site:
    """A quarantined capture in this test's ledger, with the tools module beside it."""
    made = make_site(tmp_path, ledger_target)
    ledger = open_ledger(ledger_target)
    try:
        leave_uncertain(made, ledger)
    finally:
        ledger.close()
    return made


def _snapshot(site: Site) -> object:
    ledger = open_ledger(site.target)
    try:
        return protocol_snapshot(ledger)
    finally:
        ledger.close()


def _status(site: Site) -> EffectStatus:
    ledger = open_ledger(site.target)
    try:
        record = ledger.get(OP)
        assert record is not None
        return record.status
    finally:
        ledger.close()


def test_confirm_refuses_an_output_the_tool_could_not_return(site: Site) -> None:
    """A string for a tool declared ``-> dict``: one line, exit 2, nothing written."""
    before = _snapshot(site)

    done = site.ops(
        *CONFIRM, "--output-json", '"yes it went through"', "--tools", "billing_tools", code=2
    )

    assert "$ is a str, not an object" in done.stderr
    assert "billing_tools.capture" in done.stderr
    assert _snapshot(site) == before


def test_confirm_with_tools_accepts_a_matching_output(site: Site) -> None:
    """An object for ``-> dict`` is written, with no warning."""
    done = site.ops(*CONFIRM, "--output-json", '{"id": "cap_000001"}', "--tools", "billing_tools")

    assert "confirmed" in done.stdout
    assert "warning" not in done.stderr
    assert _status(site) is EffectStatus.CONFIRMED


def test_confirm_without_tools_warns_that_the_output_is_unchecked(site: Site) -> None:
    """Without --tools the resolution is written, and stderr says the output went unchecked."""
    done = site.ops(*CONFIRM, "--output-json", '"yes it went through"')

    assert "warning: the output is unchecked" in done.stderr
    assert _status(site) is EffectStatus.CONFIRMED


@pytest.mark.parametrize(
    ("args", "after"),
    [
        (
            (*CONFIRM, "--output-json", '{"id": "cap_000001"}', "--tools", "billing_tools"),
            "CONFIRMED",
        ),
        (("reject", OP, *AUDIT), "REJECTED"),
        (("authorize-retry", OP, *AUDIT), "PREPARED"),
    ],
)
def test_every_resolution_has_a_dry_run_showing_before_and_after(
    site: Site, args: tuple[str, ...], after: str
) -> None:
    """--dry-run prints the record before and as it would be after, and writes nothing."""
    before = _snapshot(site)

    done = site.ops(*args, "--dry-run")

    lines = done.stdout.splitlines()
    assert lines[0].endswith(f"from QUARANTINED to {after}")
    assert "--- before" in lines
    assert "--- after" in lines
    assert lines[-1] == "nothing was written"
    assert _snapshot(site) == before


def test_a_dry_run_is_refused_like_the_real_thing(site: Site) -> None:
    """A resolution the rules refuse is refused in a dry run too (exit 1, one line)."""
    site.ops("reject", OP, *AUDIT)
    before = _snapshot(site)

    done = site.ops("authorize-retry", OP, *AUDIT, "--dry-run", code=1)

    assert "it is REJECTED" in done.stderr
    assert _snapshot(site) == before


@dataclasses.dataclass
class Receipt:
    """A dataclass output."""

    id: str
    amount: int


class Capture(TypedDict):
    """A TypedDict output."""

    id: str
    amount_cents: int


@pytest.mark.parametrize(
    ("output", "annotation", "problem"),
    [
        ({"id": "x"}, dict, None),
        ("yes", dict, "$ is a str, not an object"),
        ([1, 2], list[int], None),
        ([1, "2"], list[int], "$[1] is a str, not an int"),
        ({"a": 1}, dict[str, int], None),
        ({"a": "1"}, dict[str, int], "$.a is a str, not an int"),
        (None, dict | None, None),
        (3, dict | None, "$ is an int, not"),
        (1, float, None),
        ("ok", Literal["ok", "failed"], None),
        ("meh", Literal["ok", "failed"], "not one of"),
        ({"id": "c", "amount_cents": 5}, Capture, None),
        ({"id": "c"}, Capture, "lacks the key(s) amount_cents"),
        ([1, "a"], tuple[int, str], None),
        ([1], tuple[int, str], "has 1 items, not 2"),
        ("anything", Any, None),
    ],
)
def test_output_problem_checks_the_declared_type(
    output: Any, annotation: Any, problem: str | None
) -> None:
    """Each kind of annotation is checked, and a mismatch names where it is."""
    found = output_problem(output, annotation, None)
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert problem in found


def test_output_problem_reads_a_dataclass_through_its_codec() -> None:
    """A dataclass output is rebuilt by the codec; a missing field is refused."""
    from effectguard._codec import codec_for  # noqa: PLC0415 - beside its only use

    codec = codec_for(Receipt)
    assert output_problem({"id": "r1", "amount": 5}, Receipt, codec) is None
    found = output_problem({"id": "r1"}, Receipt, codec)
    assert found is not None
    assert "cannot be read as Receipt" in found
