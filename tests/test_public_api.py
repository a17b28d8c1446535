"""The top-level API: a small ``__all__``, other documented names loaded lazily, a cheap import.

Each start-up check runs a fresh interpreter, because this one has imported everything.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import effectguard

#: The root's whole API: what the README and the guides use. A name joins it on purpose.
PUBLIC = sorted(
    [
        "INJECTED",
        "AsyncEffectFunction",
        "CallScope",
        "Configuration",
        "ConfigurationError",
        "DataclassCodec",
        "EffectAwaitingApproval",
        "EffectContract",
        "EffectExecutor",
        "EffectFunction",
        "EffectGuardError",
        "EffectInProgress",
        "EffectLedger",
        "EffectNotConfirmed",
        "EffectNotSent",
        "EffectOutcomeUnknown",
        "EffectPruned",
        "EffectQuarantined",
        "EffectRejected",
        "EffectResult",
        "EffectStatus",
        "EventType",
        "InvalidRequestError",
        "LedgerError",
        "LedgerIntegrityError",
        "LedgerUnavailableError",
        "Observer",
        "OperationConflictError",
        "OutcomeProbeResult",
        "OutputCodec",
        "OutputNotStored",
        "ProbeStatus",
        "PydanticCodec",
        "RecoveryReport",
        "SQLiteEffectLedger",
        "Transition",
        "UnknownOutcomePolicy",
        "call_scope",
        "call_scoped",
        "configure",
        "effect",
        "get_contract",
        "is_effect",
        "observe_effects",
        "observing",
        "open_ledger",
        "recover",
        "use_executor",
    ]
)

#: Root names that also live in a documented subpackage: the same object in both.
ALSO_IN = {
    **dict.fromkeys(["EffectLedger", "open_ledger", "EventType"], "effectguard.ledger"),
    "SQLiteEffectLedger": "effectguard.ledger.sqlite",
    **dict.fromkeys(["RecoveryReport", "recover"], "effectguard.operator"),
    **dict.fromkeys(
        [
            "ConfigurationError",
            "EffectGuardError",
            "EffectInProgress",
            "EffectNotConfirmed",
            "EffectNotSent",
            "EffectOutcomeUnknown",
            "EffectPruned",
            "EffectQuarantined",
            "EffectRejected",
            "InvalidRequestError",
            "LedgerError",
            "LedgerIntegrityError",
            "LedgerUnavailableError",
            "OperationConflictError",
            "OutputNotStored",
        ],
        "effectguard.errors",
    ),
}

#: Names the root exported before 0.1.0 and no longer does, with their public home now.
MOVED = {
    **dict.fromkeys(
        ["AnchorHead", "EffectEvent", "OperationRecord", "VerifyProblem", "VerifyReport"],
        "effectguard.ledger",
    ),
    "PostgresEffectLedger": "effectguard.ledger.postgres",
    **dict.fromkeys(
        [
            "FencedWriteError",
            "IllegalTransitionError",
            "InternalError",
            "LedgerLockedError",
            "LedgerNotFoundError",
            "LedgerSchemaError",
            "OperationNotFoundError",
        ],
        "effectguard.errors",
    ),
    **dict.fromkeys(["ToolIndex", "load_tools"], "effectguard.operator"),
}

#: Modules that make ``import effectguard`` or ``agent-effect-ops --help`` slow.
HEAVY = [
    "asyncio",
    "wrapt",
    "effectguard._executor",
    "effectguard._codec",
    "effectguard._decorator",
]


def fresh_modules(code: str) -> set[str]:
    """The modules loaded after running ``code`` in a new interpreter."""
    probe = f"{textwrap.dedent(code)}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_all_is_the_whole_root_api():
    """``__all__`` is exactly the documented names, and ``import *`` gives exactly those."""
    namespace: dict[str, object] = {}
    exec("from effectguard import *", namespace)  # noqa: S102 - the statement under test
    assert sorted(effectguard.__all__) == PUBLIC
    assert set(namespace) - {"__builtins__"} == set(PUBLIC)


@pytest.mark.parametrize("name", PUBLIC)
def test_every_root_name_resolves_lazily_to_one_object(name: str):
    """Each root name loads on first use; where a subpackage documents it, it is that object."""
    value = getattr(effectguard, name)
    if name in ALSO_IN:
        assert getattr(importlib.import_module(ALSO_IN[name]), name) is value


@pytest.mark.parametrize("name", sorted(MOVED))
def test_a_moved_name_fails_at_the_root_and_says_where_it_lives(name: str):
    """A name that left the root is an AttributeError naming its home, where it imports."""
    with pytest.raises(AttributeError, match=f"import it from {MOVED[name]}"):
        getattr(effectguard, name)
    assert getattr(importlib.import_module(MOVED[name]), name) is not None


def test_nothing_outside_all_is_importable_from_the_root():
    """A private module's name (``effect``'s helpers, the machine) never leaks to the root."""
    for name in ["EffectDecorator", "canonical_json", "request_fingerprint", "claims_first"]:
        with pytest.raises(ImportError):
            exec(f"from effectguard import {name}", {})  # noqa: S102 - the statement under test


def test_dir_lists_every_export_and_unknown_names_fail():
    """``dir(effectguard)`` shows the lazy names too; a name nobody exports is an AttributeError."""
    listed = set(dir(effectguard))
    assert set(PUBLIC) <= listed
    assert "__version__" in listed
    with pytest.raises(AttributeError, match="no attribute 'efect'"):
        _ = effectguard.efect  # type: ignore[attr-defined]


def test_import_effectguard_loads_no_executor_asyncio_or_wrapt():
    """``import effectguard`` alone is cheap: the decorator and executor load when first used."""
    assert fresh_modules("import effectguard").isdisjoint([*HEAVY, "importlib.metadata", "psycopg"])
    used = fresh_modules("from effectguard import effect")
    assert {"wrapt", "effectguard._decorator"} <= used


def test_ops_help_loads_no_executor_asyncio_codec_or_wrapt():
    """``agent-effect-ops --help`` imports neither the executor, asyncio, the codec nor wrapt."""
    loaded = fresh_modules(
        """
        import contextlib, io
        from effectguard.cli.ops import main
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
            main(["--help"], prog_name="agent-effect-ops")
        """
    )
    assert "effectguard.cli.ops" in loaded
    assert loaded.isdisjoint([*HEAVY, "importlib.metadata", "effectguard.ledger"])


def test_version_comes_from_the_installed_metadata(tmp_path: Path):
    """``__version__`` and both CLIs' ``--version`` report the metadata's version, not a literal."""
    metadata = tmp_path / "effectguard-9.8.7.dist-info"
    metadata.mkdir()
    (metadata / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: effectguard\nVersion: 9.8.7\n", encoding="utf-8"
    )
    # Found first on sys.path, this distribution shadows the installed one's metadata.
    code = f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        from click.testing import CliRunner
        import effectguard
        from effectguard.cli.main import cli
        from effectguard.cli.ops import main
        print(effectguard.__version__)
        print(CliRunner().invoke(cli, ["--version"]).stdout.strip())
        print(CliRunner().invoke(main, ["--version"]).stdout.strip())
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert done.stdout.splitlines() == [
        "9.8.7",
        "agent-effect, version 9.8.7",
        "agent-effect-ops, version 9.8.7",
    ]
