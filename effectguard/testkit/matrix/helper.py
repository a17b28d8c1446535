"""The helper interpreter that forks episode children (``-m effectguard.testkit.matrix.helper``).

Kept apart from :mod:`effectguard.testkit.matrix.child`, which the package
imports, so that running it never re-executes a module already imported.
"""

import logging
import os

from effectguard.testkit.matrix.child import serve

if __name__ == "__main__":
    # Episodes fail effects on purpose: the executor's log lines stay off stderr unless
    # EFFECTGUARD_LOG_LEVEL asks for them, as in agent-effect itself.
    level = os.environ.get("EFFECTGUARD_LOG_LEVEL", "ERROR").upper()
    if level in logging.getLevelNamesMapping():
        logging.getLogger("effectguard").setLevel(level)
    serve()
