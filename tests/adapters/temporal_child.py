"""One attempt of the ``charge`` activity in a process of its own (the worker that runs it).

``python temporal_child.py LEDGER DIRECTORY ATTEMPT RUN_ID [kill|gate]``: runs
the attempt under ``ActivityEnvironment`` with the shop of :mod:`temporal_shop`,
whose provider file is ``DIRECTORY/payments.db``. With ``kill`` the capture
waits, after the provider committed, for the parent to SIGKILL this process;
with ``gate``, until the parent creates ``DIRECTORY/gate``.
Prints one JSON line: ``{"output": ...}`` or ``{"error": type, "non_retryable": ...}``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from temporal_shop import Shop, attempt
from temporalio.exceptions import ApplicationError


def main() -> None:
    ledger, directory, number, run_id = sys.argv[1:5]
    hold = sys.argv[5] if len(sys.argv) > 5 else None
    shop = Shop(ledger, Path(directory), hold=hold)
    try:
        output = attempt(shop.charge, "INV-7", 2500, number=int(number), run_id=run_id)
    except ApplicationError as exc:
        print(json.dumps({"error": exc.type, "non_retryable": exc.non_retryable}), flush=True)
    else:
        print(json.dumps({"output": output}), flush=True)
    finally:
        shop.close()


if __name__ == "__main__":
    main()
