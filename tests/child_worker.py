"""A separate process that runs the test capture contract, for concurrency and crash tests.

Usage: python child_worker.py MODE LEDGER_PATH PROVIDER_PATH [--start FILE] [--guaranteed]

contend             wait for the start file, execute once, print the result as JSON
crash-after-claim   execute; the handler says "claimed" and then hangs (to be killed)
crash-after-commit  execute; the handler commits, says "committed" and hangs (to be killed)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from support import ARGS, capture_contract

from effectguard import EffectExecutor, SQLiteEffectLedger
from effectguard.testkit import FakePaymentProvider


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode")
    parser.add_argument("ledger")
    parser.add_argument("provider")
    parser.add_argument("--start", type=Path)
    parser.add_argument("--guaranteed", action="store_true")
    options = parser.parse_args()
    mode = options.mode
    provider = FakePaymentProvider(path=options.provider, idempotency_guaranteed=options.guaranteed)
    ledger = SQLiteEffectLedger(options.ledger)
    executor = EffectExecutor(ledger)
    contract = capture_contract(provider, guaranteed=options.guaranteed)

    def hang(message: str) -> None:
        print(message, flush=True)
        time.sleep(600)

    if mode == "contend":
        print("ready", flush=True)
        while not options.start.exists():
            time.sleep(0.001)

        def slow(arguments, *, idempotency_key):
            time.sleep(0.5)  # hold the operation while the other contenders arrive
            return provider.handler(arguments, idempotency_key=idempotency_key)

        result = executor.execute(contract, ARGS, slow)
        print(json.dumps({"status": result.status.value}), flush=True)
    elif mode == "crash-after-claim":

        def after_claim(arguments, *, idempotency_key):
            hang("claimed")

        executor.execute(contract, ARGS, after_claim)
    elif mode == "crash-after-commit":

        def after_commit(arguments, *, idempotency_key):
            provider.handler(arguments, idempotency_key=idempotency_key)
            hang("committed")

        executor.execute(contract, ARGS, after_commit)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
