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

#: What a user of the README needs. The lead adds EffectNotSent, OutputNotStored,
#: call_scope and call_scoped here when merging the branches that define them.
PUBLIC = [
    "INJECTED",
    "ConfigurationError",
    "EffectContract",
    "EffectExecutor",
    "EffectGuardError",
    "EffectInProgress",
    "EffectNotConfirmed",
    "EffectNotSent",
    "EffectOutcomeUnknown",
    "EffectPruned",
    "EffectQuarantined",
    "EffectRejected",
    "EffectResult",
    "EffectStatus",
    "LedgerUnavailableError",
    "OperationConflictError",
    "OutcomeProbeResult",
    "OutputNotStored",
    "ProbeStatus",
    "SQLiteEffectLedger",
    "call_scope",
    "call_scoped",
    "configure",
    "effect",
    "open_ledger",
]

#: Every name importable from ``effectguard``, and the public module it comes from.
EXPORTED = {
    **dict.fromkeys(
        [
            "INJECTED",
            "AsyncEffectFunction",
            "EffectDecorator",
            "EffectFunction",
            "effect",
            "get_contract",
            "is_effect",
            "use_executor",
        ],
        "effectguard.decorator",
    ),
    **dict.fromkeys(
        ["EffectExecutor", "Observer", "Transition", "observing"], "effectguard.executor"
    ),
    **dict.fromkeys(["CallScope", "call_scope", "call_scoped"], "effectguard.scope"),
    **dict.fromkeys(["Configuration", "configure", "observe_effects"], "effectguard.config"),
    **dict.fromkeys(["RecoveryReport", "recover"], "effectguard.recovery"),
    **dict.fromkeys(["ToolIndex", "load_tools"], "effectguard.decorator.discovery"),
    **dict.fromkeys(
        ["EffectContract", "OutputCodec", "UnknownOutcomePolicy"], "effectguard.contract"
    ),
    **dict.fromkeys(["DataclassCodec", "PydanticCodec"], "effectguard.codec"),
    **dict.fromkeys(["AnchorHead", "EffectLedger", "open_ledger"], "effectguard.ledger"),
    "SQLiteEffectLedger": "effectguard.ledger.sqlite",
    "PostgresEffectLedger": "effectguard.ledger.postgres",
    **dict.fromkeys(
        [
            "EffectEvent",
            "EffectResult",
            "EffectStatus",
            "EventType",
            "OperationRecord",
            "OutcomeProbeResult",
            "ProbeStatus",
            "VerifyProblem",
            "VerifyReport",
        ],
        "effectguard.model",
    ),
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
            "FencedWriteError",
            "IllegalTransitionError",
            "InternalError",
            "InvalidRequestError",
            "LedgerError",
            "LedgerIntegrityError",
            "LedgerLockedError",
            "LedgerNotFoundError",
            "LedgerSchemaError",
            "LedgerUnavailableError",
            "OperationConflictError",
            "OperationNotFoundError",
            "OutputNotStored",
        ],
        "effectguard.errors",
    ),
}

#: Modules that make ``import effectguard`` or ``agent-effect-ops --help`` slow.
HEAVY = ["asyncio", "wrapt", "effectguard.executor", "effectguard.codec", "effectguard.decorator"]


def fresh_modules(code: str) -> set[str]:
    """The modules loaded after running ``code`` in a new interpreter."""
    probe = f"{textwrap.dedent(code)}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_all_is_what_a_readme_user_needs():
    """``__all__`` is exactly the README's names, and ``import *`` gives exactly those."""
    namespace: dict[str, object] = {}
    exec("from effectguard import *", namespace)  # noqa: S102 - the statement under test
    assert effectguard.__all__ == PUBLIC
    assert set(namespace) - {"__builtins__"} == set(PUBLIC)


@pytest.mark.parametrize("name", sorted(EXPORTED))
def test_exported_name_is_its_modules_object(name: str):
    """Every exported name resolves, lazily, to the very object its own module holds."""
    owner = importlib.import_module(EXPORTED[name])
    assert getattr(effectguard, name) is getattr(owner, name)


def test_dir_lists_every_export_and_unknown_names_fail():
    """``dir(effectguard)`` shows the lazy names too; a name nobody exports is an AttributeError."""
    listed = set(dir(effectguard))
    assert set(EXPORTED) <= listed
    assert "__version__" in listed
    with pytest.raises(AttributeError, match="no attribute 'efect'"):
        _ = effectguard.efect  # type: ignore[attr-defined]


def test_import_effectguard_loads_no_executor_asyncio_or_wrapt():
    """``import effectguard`` alone is cheap: the decorator and executor load when first used."""
    assert fresh_modules("import effectguard").isdisjoint([*HEAVY, "importlib.metadata", "psycopg"])
    used = fresh_modules("from effectguard import effect")
    assert {"wrapt", "effectguard.decorator", "effectguard.executor"} <= used


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
