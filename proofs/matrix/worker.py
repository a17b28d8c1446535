"""The entry point of a matrix worker process (``-m proofs.matrix.worker``).

Arguments: the ledger target, the shared clock's file, the run's seed, the
ledger's options (JSON) and the worker's number. Kept apart from
:mod:`proofs.matrix.workers`, which the package imports, so that
running it never re-executes a module already imported.
"""

import json
import logging
import os
import sys

from proofs.matrix.workers import serve

if __name__ == "__main__":
    # Episodes fail effects on purpose: the executor's log lines stay off stderr unless
    # EFFECTGUARD_LOG_LEVEL asks for them, as in agent-effect itself.
    level = os.environ.get("EFFECTGUARD_LOG_LEVEL", "ERROR").upper()
    if level in logging.getLevelNamesMapping():
        logging.getLogger("effectguard").setLevel(level)
    target, clock_path, seed, options, index = sys.argv[1:6]
    serve(target, clock_path, int(seed), json.loads(options), int(index))
