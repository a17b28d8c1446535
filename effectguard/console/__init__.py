"""A browser console for operators: what needs a person, its evidence, and audited resolutions.

Needs the ``console`` extra (``pip install 'effectguard[console]'``); importing
it without the extra raises an ImportError that names the extra. Start it with
``agent-effect-ops serve``, or serve :func:`create_app` with any ASGI server.
"""

from __future__ import annotations

from effectguard.console.app import ConsoleSettings, create_app
from effectguard.console.server import serve

__all__ = ["ConsoleSettings", "create_app", "serve"]
