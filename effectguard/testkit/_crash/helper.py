"""The helper interpreter that forks episode children (``-m effectguard.testkit._crash.helper``).

Its arguments name modules to import before forking (a ledger backend and its
driver), so that no child pays for importing them. Kept apart from
:mod:`effectguard.testkit._crash.child`, which the package imports, so that
running it never re-executes a module already imported.
"""

import importlib
import logging
import os
import sys

from effectguard.testkit._crash.child import serve

if __name__ == "__main__":
    # Episodes fail effects on purpose: the executor's log lines stay off stderr unless
    # EFFECTGUARD_LOG_LEVEL asks for them, as in agent-effect itself.
    level = os.environ.get("EFFECTGUARD_LOG_LEVEL", "ERROR").upper()
    if level in logging.getLevelNamesMapping():
        logging.getLogger("effectguard").setLevel(level)
    # Modules named on the command line (a backend's driver) are imported once, here,
    # rather than by every forked child; none of them opens a connection on import.
    for name in sys.argv[1:]:
        importlib.import_module(name)
    serve()
