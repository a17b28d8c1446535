"""Lets a script in docs/ import ``benchmarks``, which lives in the checkout, not in the wheel.

``python docs/<script>.py`` puts docs/ on ``sys.path``, not the repository root;
importing this module puts the root there too, wherever the script is run from.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
