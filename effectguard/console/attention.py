"""What needs a person: operations to settle and requests to approve, oldest first, by page.

Plain functions over the public ledger API, with no web framework in them, so
the console's pages and their tests read the same facts the CLI prints.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from effectguard._model import EffectStatus

if TYPE_CHECKING:
    from effectguard._model import OperationRecord
    from effectguard.ledger import EffectLedger

__all__ = [
    "ATTENTION_STATUSES",
    "AttentionPage",
    "approved_unsent",
    "awaiting_approval",
    "needs_attention",
]

#: Statuses that wait on a person or on recovery. DISPATCHED counts only once its
#: lease has expired or its owner is gone: a live dispatch is work in progress.
ATTENTION_STATUSES = (
    EffectStatus.QUARANTINED,
    EffectStatus.OUTCOME_UNKNOWN,
    EffectStatus.RECONCILING,
    EffectStatus.DISPATCHED,
)

#: How many operations of one status a page reads at most. Beyond it the page
#: says it is truncated instead of loading the whole ledger into memory.
SCAN_LIMIT = 5000


@dataclass(frozen=True, slots=True)
class AttentionPage:
    """One page of the operations that need attention, with counts over everything scanned.

    ``counts`` maps (contract, status) to how many operations were found;
    ``truncated`` is true when some status had :data:`SCAN_LIMIT` or more
    operations: counts and pages then cover only its most recently changed ones.
    """

    rows: tuple[OperationRecord, ...]
    counts: dict[tuple[str, str], int]
    total: int
    page: int
    pages: int
    truncated: bool


def needs_attention(
    ledger: EffectLedger,
    *,
    status: EffectStatus | None = None,
    contract: str | None = None,
    page: int = 1,
    page_size: int = 50,
) -> AttentionPage:
    """Return page ``page`` (from 1) of the operations that need a person, oldest change first.

    ``status`` narrows to one of :data:`ATTENTION_STATUSES` and ``contract`` to
    one contract name; a status outside that set is a ``ValueError``.
    """
    if status is not None and status not in ATTENTION_STATUSES:
        names = ", ".join(s.value for s in ATTENTION_STATUSES)
        msg = f"{status.value} does not need attention; filter by one of {names}"
        raise ValueError(msg)
    found: list[OperationRecord] = []
    truncated = False
    for wanted in (status,) if status is not None else ATTENTION_STATUSES:
        listed = ledger.list_operations(status=wanted, contract=contract, limit=SCAN_LIMIT)
        truncated = truncated or len(listed) >= SCAN_LIMIT
        found.extend(record for record in listed if _stuck(record))
    return _page(found, page=page, page_size=page_size, truncated=truncated)


def awaiting_approval(
    ledger: EffectLedger,
    *,
    contract: str | None = None,
    page: int = 1,
    page_size: int = 50,
) -> AttentionPage:
    """Return page ``page`` (from 1) of the requests AWAITING_APPROVAL, longest waiting first.

    Only operations in that status, and every one of them up to
    :data:`SCAN_LIMIT` (``truncated`` beyond it); ``contract`` narrows to one
    contract name. Each record's arguments are as the ledger stores them:
    ``redact=`` values already replaced by ``"[redacted]"``.
    """
    listed = ledger.list_operations(
        status=EffectStatus.AWAITING_APPROVAL, contract=contract, limit=SCAN_LIMIT
    )
    found = [record for record in listed if record.status is EffectStatus.AWAITING_APPROVAL]
    return _page(found, page=page, page_size=page_size, truncated=len(listed) >= SCAN_LIMIT)


def approved_unsent(
    ledger: EffectLedger, *, contract: str | None = None, limit: int = 50
) -> tuple[OperationRecord, ...]:
    """The approved requests no call has sent yet, oldest approval first, at most ``limit``.

    An approval is spent by the next call with the same request; until then the
    operation is PREPARED at attempt 0 with the approval's evidence (who, why,
    until when). A person who approved something the agent never asked for
    again sees it here; an expired one stays listed, marked by its expiry, until
    a call finds it void.
    """
    listed = ledger.list_operations(
        status=EffectStatus.PREPARED, contract=contract, limit=SCAN_LIMIT
    )
    found = [
        record
        for record in listed
        if record.status is EffectStatus.PREPARED
        and record.attempts == 0
        and "approved_fingerprint" in record.evidence
    ]
    found.sort(key=lambda record: (record.updated_at, record.operation_id))
    return tuple(found[:limit])


def _page(
    found: list[OperationRecord], *, page: int, page_size: int, truncated: bool
) -> AttentionPage:
    """Page ``page`` of ``found``, oldest change first; a page out of range is the nearest one."""
    found.sort(key=lambda record: (record.updated_at, record.operation_id))
    counts = Counter((record.contract, record.status.value) for record in found)
    pages = max(1, -(-len(found) // page_size))
    page = min(max(1, page), pages)
    start = (page - 1) * page_size
    return AttentionPage(
        rows=tuple(found[start : start + page_size]),
        counts=dict(sorted(counts.items())),
        total=len(found),
        page=page,
        pages=pages,
        truncated=truncated,
    )


def _stuck(record: OperationRecord) -> bool:
    """True unless ``record`` is a dispatch still held by a live lease."""
    return record.status is not EffectStatus.DISPATCHED or not record.lease_live
