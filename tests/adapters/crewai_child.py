"""A process running the shop's crew once: ``crewai_child.py run DIR [FAULT...]``.

It opens the shop in DIR (ledger and provider files), kicks off a one-task
crew whose scripted model captures INV-7 and then answers, and prints one
JSON line: the final answer, or the pending effects it paused on, and the
tool results the model read. Each run is a new process, as a restarted
service is.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from crewai_support import ScriptLLM, action, final, shop_crew
from effect_shop import open_shop

from effectguard.adapters.crewai import CrewPaused
from effectguard.testkit import Fault


def main() -> None:
    """Run the crew once and report."""
    _, command, directory, *faults = sys.argv
    assert command == "run", command
    shop = open_shop(Path(directory), payment_faults=[Fault(f) for f in faults])
    llm = ScriptLLM(
        [action("capture", {"invoice_id": "INV-7", "amount_cents": 700}), final("Captured INV-7.")]
    )
    try:
        answer = shop_crew(llm, shop.capture).kickoff().raw
        pending = []
    except CrewPaused as paused:
        answer = None
        pending = [p.to_json() for p in paused.pending]
    shop.close()
    print(json.dumps({"final": answer, "pending": pending, "observations": llm.observations()}))
    sys.stdout.flush()
    # CrewAI 1.6's console listener, for a crew that is not verbose, waits 5 s per task in a
    # worker thread that interpreter shutdown joins; everything this child reports is durable.
    os._exit(0)


if __name__ == "__main__":
    main()
