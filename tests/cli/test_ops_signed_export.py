"""Signed exports: ``keygen``, ``export --sign-key`` and ``verify --archive FILE --public-key PUB``.

The chains and the claims anchor prove order inside one ledger; a signed export
proves, from outside it, that a file is what was exported and that the ledger
still holds it. Every tampering of the file (an edit, a deletion, a reordering,
a truncation, an addition) and a ledger rewritten whole (which the ledger's own
``verify`` cannot see) must each fail, naming what broke.
"""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from extras_support import import_extra
from recovery_support import Site, leave_uncertain, make_site

from effectguard import open_ledger

import_extra("cryptography", "sign")


@pytest.fixture
def site(tmp_path: Path, ledger_target: str) -> Site:
    """Two quarantined captures in this test's ledger, and a key pair beside it."""
    made = make_site(tmp_path, ledger_target)
    _two_captures(made)
    made.ops("keygen", "--private-key", "key.pem", "--public-key", "key.pub")
    return made


def _two_captures(site: Site) -> None:
    ledger = open_ledger(site.target)
    try:
        leave_uncertain(site, ledger, invoice="INV-1")
        leave_uncertain(site, ledger, invoice="INV-2")
    finally:
        ledger.close()


def _signed(site: Site) -> Path:
    out = site.directory / "signed.jsonl"
    done = site.ops("export", "--sign-key", "key.pem", "--output", str(out))
    assert "signed with key" in done.stdout
    return out


def _check(site: Site, export: Path, *, code: int) -> str:
    done = site.ops("verify", "--archive", str(export), "--public-key", "key.pub", code=code)
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error")]
    assert len(errors) == (1 if code else 0), done.stderr
    return errors[0] if errors else done.stdout


def test_keygen_writes_an_owner_only_private_key_and_never_overwrites(site: Site) -> None:
    """The private key is 0600, the public 0644; a second keygen on either path is refused."""
    private, public = site.directory / "key.pem", site.directory / "key.pub"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert stat.S_IMODE(public.stat().st_mode) == 0o644
    assert private.read_text(encoding="ascii").startswith("-----BEGIN PRIVATE KEY-----")
    before = private.read_bytes()

    done = site.ops("keygen", "--private-key", "key.pem", "--public-key", "other.pub", code=1)

    assert "already exists" in done.stderr
    assert private.read_bytes() == before
    assert not (site.directory / "other.pub").exists()
    same = site.ops("keygen", "--private-key", "a.pem", "--public-key", "a.pem", code=1)
    assert "the same file" in same.stderr
    assert not (site.directory / "a.pem").exists()


def test_a_signed_export_verifies_and_names_its_key(site: Site) -> None:
    """The untouched export checks out: exit 0, both operations checked, the key named."""
    export = _signed(site)
    last = json.loads(export.read_text(encoding="utf-8").splitlines()[-1])
    assert last["kind"] == "signature"
    assert last["lines"] == len(export.read_text(encoding="utf-8").splitlines()) - 1

    out = _check(site, export, code=0)

    assert f"checked 2 operations of the export signed by key {last['key_id']}" in out


def _edit_field(lines: list[str]) -> list[str]:
    data = json.loads(lines[0])
    data["status"] = "CONFIRMED"
    return [json.dumps(data, sort_keys=True), *lines[1:]]


def _space(lines: list[str]) -> list[str]:
    return [lines[0] + " ", *lines[1:]]


def _swap(lines: list[str]) -> list[str]:
    return [lines[1], lines[0], *lines[2:]]


def _delete(lines: list[str]) -> list[str]:
    return [*lines[:2], *lines[3:]]


def _drop_signature(lines: list[str]) -> list[str]:
    return lines[:-1]


def _cut_half(lines: list[str]) -> list[str]:
    return lines[: len(lines) // 2]


def _append(lines: list[str]) -> list[str]:
    return [*lines, lines[0]]


def _recount(lines: list[str]) -> list[str]:
    data = json.loads(lines[-1])
    data["lines"] -= 1
    return [*lines[:-2], json.dumps(data, sort_keys=True)]


TAMPERINGS: dict[str, tuple[Callable[[list[str]], list[str]], str]] = {
    "a field edited": (_edit_field, "differ from the ones signed"),
    "one byte added": (_space, "differ from the ones signed"),
    "two lines swapped": (_swap, "differ from the ones signed"),
    "an event deleted": (_delete, "lines deleted or added"),
    "the signature removed": (_drop_signature, "no signature line"),
    "the file truncated": (_cut_half, "no signature line"),
    "a line appended": (_append, "follow the signature"),
    "the signature line re-counted": (_recount, "signature line was edited"),
}


@pytest.mark.parametrize("how", TAMPERINGS)
def test_every_tampering_of_the_file_fails_naming_it(site: Site, how: str) -> None:
    """Each change to the file is exit 1 with one line saying what broke; the ledger is fine."""
    export = _signed(site)
    tamper, expected = TAMPERINGS[how]
    lines = export.read_text(encoding="utf-8").splitlines()
    export.write_text("\n".join(tamper(lines)) + "\n", encoding="utf-8")

    error = _check(site, export, code=1)

    assert expected in error
    assert "is not what was signed" in error
    site.ops("verify")  # the ledger itself was never touched


def test_another_key_is_refused_by_name(site: Site) -> None:
    """A signature checked with someone else's public key fails and names both keys."""
    export = _signed(site)
    site.ops("keygen", "--private-key", "other.pem", "--public-key", "other.pub")

    done = site.ops("verify", "--archive", str(export), "--public-key", "other.pub", code=1)

    signer = json.loads(export.read_text(encoding="utf-8").splitlines()[-1])["key_id"]
    assert f"signed by key {signer}, not by the public key given" in done.stderr


def test_a_ledger_rewritten_whole_fails_against_the_signed_export(
    site: Site, ledger_sql: Callable[..., None], backend: str
) -> None:
    """Whoever rewrites every table (chains and anchor alike) passes plain verify, not this."""
    export = _signed(site)
    for table in ("events", "operations", "claims"):
        ledger_sql(f"DELETE FROM {table}")  # noqa: S608 - fixed table names
    if backend == "postgres":  # the anchor's shard heads, back to empty chains
        ledger_sql("UPDATE claims_head SET count = 0, running = ''")
    # The forger's ledger: the same operations, made again from scratch (on a new provider).
    (site.directory / "provider.db").unlink()
    _two_captures(site)
    site.ops("verify")  # internally consistent: the ledger alone cannot tell

    done = site.ops("verify", "--archive", str(export), "--public-key", "key.pub", code=1)

    assert "the ledger has been tampered with" in done.stderr
    if backend == "sqlite":  # one anchor chain: the rewrite cannot extend the signed head
        assert "operation '(anchor)'" in done.stdout
    # PostgreSQL shards its anchor by claim; whether the rewrite breaks a signed shard head
    # depends on where the new claims land, so only the events are asserted on both.
    for operation_id in ("invoice:INV-1:capture", "invoice:INV-2:capture"):
        assert f"{operation_id!r} event 1: differs from the event the export signed" in done.stdout


def test_an_operation_deleted_from_the_ledger_is_named(
    site: Site, ledger_sql: Callable[..., None]
) -> None:
    """An exported operation missing from the ledger, with no tombstone, is a problem."""
    export = _signed(site)
    ledger_sql("DELETE FROM events WHERE operation_id = ?", "invoice:INV-1:capture")
    ledger_sql("DELETE FROM operations WHERE operation_id = ?", "invoice:INV-1:capture")

    done = site.ops("verify", "--archive", str(export), "--public-key", "key.pub", code=1)

    assert "'invoice:INV-1:capture': in the signed export but gone from the ledger" in done.stdout


def test_later_events_after_the_export_still_verify(site: Site) -> None:
    """The ledger moving on (a resolution after the export) is not a tampering."""
    export = _signed(site)
    site.ops(
        "reject",
        "invoice:INV-1:capture",
        "--actor",
        "ops@example.com",
        "--reason",
        "customer cancelled",
        "--evidence-reference",
        "TICKET-1",
    )

    _check(site, export, code=0)


BAD_INPUT: dict[str, tuple[list[str], str]] = {
    "a public key as the signing key": (
        ["export", "--sign-key", "key.pub"],
        "not an unencrypted PEM private key",
    ),
    "a missing signing key": (["export", "--sign-key", "nowhere.pem"], "cannot read --sign-key"),
    "a private key to verify with": (
        ["verify", "--archive", "key.pub", "--public-key", "key.pem"],
        "not a PEM public key",
    ),
    "a file that is not an export": (
        ["verify", "--archive", "key.pem", "--public-key", "key.pub"],
        "not an export",
    ),
    "a public key without an archive": (["verify", "--public-key", "key.pub"], "--archive"),
}


@pytest.mark.parametrize("case", BAD_INPUT)
def test_bad_keys_and_files_are_one_line_and_write_nothing(
    site: Site, case: str, state: Callable[[], Any]
) -> None:
    """Exit 2, one line naming the problem, no export file left, the ledger unchanged."""
    args, expected = BAD_INPUT[case]
    before = state()

    done = site.ops(*args, code=2)

    errors = [line for line in done.stderr.splitlines() if line.startswith("Error")]
    assert len(errors) == 1, done.stderr
    assert expected in errors[0]
    assert "Traceback" not in done.stderr
    assert done.stdout == ""
    assert state() == before
