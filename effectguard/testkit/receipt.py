"""The checker's receipt as one self-contained HTML page, to attach to a review.

:func:`render_html` turns a :class:`~effectguard.testkit.checker.CheckReport`
into a page with no script, no external asset (its style is inline) and every
piece of text escaped: the tool, the contract's claims, each episode's fault
with the effects counted, its outcome, whether a person is needed, duplicates
and lost confirmations, each broken claim with its evidence, the seed and the
command that plays the same episodes again.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from effectguard._contract import EffectContract
    from effectguard.testkit.checker import CheckReport

__all__ = ["render_html"]

_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 1.6em; }
table { border-collapse: collapse; width: 100%; }
th, td { border: 1px solid #ccc; padding: .3em .5em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
code, pre { font-family: ui-monospace, monospace; background: #f6f6f6; }
pre { padding: .6em; overflow-x: auto; }
.verdict { padding: .5em .8em; font-weight: bold; }
.held { background: #e3f4e3; } .broken { background: #fbe1e1; } .unjudged { background: #f5f0dc; }
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _yes(value: bool) -> str:
    return "yes" if value else "no"


def _contract_rows(contract: EffectContract | None) -> list[tuple[str, str]]:
    if contract is None:
        return []
    return [
        ("name", f"{contract.name} (version {contract.version})"),
        ("idempotency key forwarded", _yes(contract.provider_idempotency_key is not None)),
        ("idempotency guaranteed", _yes(contract.provider_idempotency_guaranteed)),
        ("outcome probe", _yes(contract.outcome_probe is not None)),
        ("unknown outcome", contract.unknown_outcome.value),
        ("lease", f"{contract.lease_seconds:g}s"),
        ("max attempts", str(contract.max_attempts)),
    ]


def render_html(report: CheckReport, *, contract: EffectContract | None = None) -> str:
    """The receipt as a whole HTML document (a str); every value from the report is escaped."""
    verdict_class = "held" if report.held else "broken"
    rows = []
    for episode in report.episodes:
        css = "unjudged" if not episode.judged else ("held" if episode.held else "broken")
        rows.append(
            f'<tr class="{css}"><td>{episode.episode}</td><td>{_e(episode.fault)}</td>'
            f"<td>{episode.effects}</td><td>{_e(episode.status)}</td>"
            f"<td>{episode.attempts}</td><td>{_yes(episode.needs_person)}</td>"
            f"<td>{_yes(episode.duplicate)}</td><td>{_yes(episode.lost_confirmation)}</td>"
            f"<td>{_yes(episode.held) if episode.judged else 'not judged'}</td>"
            f"<td><code>{_e(episode.operation_id)}</code>"
            f"{'<br>' + _e(episode.note) if episode.note else ''}</td></tr>"
        )
    claims = []
    for claim in report.claims:
        state = {True: "held", False: "BROKEN", None: "not checked"}[claim.held]
        css = {True: "held", False: "broken", None: "unjudged"}[claim.held]
        claims.append(
            f'<tr class="{css}"><td>{_e(claim.claim)}</td><td>{state}</td>'
            f"<td>{_e(claim.evidence)}</td></tr>"
        )
    contract_rows = "".join(
        f"<tr><th>{_e(name)}</th><td><code>{_e(value)}</code></td></tr>"
        for name, value in _contract_rows(contract)
    )
    contract_table = f"<h2>The contract</h2><table>{contract_rows}</table>" if contract_rows else ""
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>effectguard check receipt: {_e(report.tool)}</title>
<style>{_STYLE}</style>
</head>
<body>
<h1>effectguard check receipt: <code>{_e(report.tool)}</code></h1>
<p class="verdict {verdict_class}">{_e(report.summary())}</p>
<table>
<tr><th>tool</th><td><code>{_e(report.tool)}</code></td></tr>
<tr><th>effects counted by</th><td>{_e(report.counted_by)}</td></tr>
<tr><th>lost acknowledgements</th><td>{_e(report.lost_ack_by)}</td></tr>
<tr><th>seed</th><td>{report.seed}</td></tr>
</table>
{contract_table}
<h2>Episodes</h2>
<table>
<tr><th>#</th><th>fault</th><th>effects</th><th>outcome</th><th>attempts</th>
<th>person needed</th><th>duplicate</th><th>lost confirmation</th><th>held</th>
<th>operation</th></tr>
{"".join(rows)}
</table>
<h2>The contract's claims</h2>
<table>
<tr><th>claim</th><th>verdict</th><th>evidence</th></tr>
{"".join(claims)}
</table>
<h2>Reproduce</h2>
<pre>{_e(report.command)}</pre>
</body>
</html>
"""
