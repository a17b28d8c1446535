"""The runtime's public names, and that importing effectguard does not load the runtime."""

from __future__ import annotations

import subprocess
import sys

import effectguard.runtime


def test_every_public_name_is_exported_and_sorted():
    """__all__ is sorted and every name in it exists."""
    names = effectguard.runtime.__all__
    assert names == sorted(names)
    assert all(hasattr(effectguard.runtime, name) for name in names)


def test_importing_effectguard_leaves_the_runtime_unloaded():
    """The core import stays light: effectguard.runtime loads only when imported."""
    check = "import sys, effectguard; print('effectguard.runtime' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "False"
