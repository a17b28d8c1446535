"""The claims anchor kept in shards: each shard a chain, one exported head pinning them all."""

from __future__ import annotations

import json

from effectguard.ledger import AnchorHead
from effectguard.ledger import _chain as anchor


def shard_rows(shard: int, operation_ids: list[str]) -> list[tuple[object, ...]]:
    """The anchor rows of ``shard`` claiming ``operation_ids`` in order (each with no events)."""
    rows, running = [], anchor.START
    for seq, operation_id in enumerate(operation_ids, start=1):
        running = anchor.advance(running, operation_id, b"")
        rows.append((shard, seq, operation_id, running, True, None))
    return rows


def test_a_joined_head_holds_every_shard_and_splits_back():
    """The joined head counts every claim and gives back each shard's head."""
    heads = [AnchorHead(0, anchor.START), AnchorHead(2, b"a" * 32), AnchorHead(1, b"b" * 32)]
    joined = anchor.joined(heads)
    assert joined.count == 3
    assert anchor.shards_of(joined) == tuple(heads)
    assert anchor.shards_of(AnchorHead(5, b"c" * 32)) is None  # a single chain's head
    assert AnchorHead.loads(json.dumps(joined.to_json())) == joined


def test_an_intact_sharded_anchor_verifies_against_its_own_head():
    """Walking two shards finds no problem, and the head it returns checks against itself."""
    rows = shard_rows(0, ["op-a", "op-b"]) + shard_rows(3, ["op-c"])
    problems, head = anchor.check_shards(rows, [], 4)
    assert problems == []
    assert head.count == 3
    assert anchor.check_shards(rows, [], 4, head)[0] == []


def test_a_deleted_claim_inside_a_shard_is_a_gap_and_a_deleted_last_one_is_a_rewind():
    """A claim missing mid-shard is reported; one missing at a shard's end, against the head."""
    full = shard_rows(0, ["op-a", "op-b", "op-c"]) + shard_rows(1, ["op-d", "op-e"])
    _, exported = anchor.check_shards(full, [], 2)
    middle = [row for row in full if row[2] != "op-b"]
    assert any("missing" in p.problem for p in anchor.check_shards(middle, [], 2)[0])
    last = [row for row in full if row[2] != "op-e"]
    assert anchor.check_shards(last, [], 2)[0] == []  # consistent without an outside reference
    problems = anchor.check_shards(last, [], 2, exported)[0]
    assert any("rewound" in p.problem for p in problems)


def test_a_head_exported_before_sharding_checks_against_shard_zero():
    """A single chain's head is a prefix of shard 0, which continues that chain."""
    before = shard_rows(0, ["op-a", "op-b"])
    _, single = anchor.check_anchor((row[1:] for row in before), [])
    after = shard_rows(0, ["op-a", "op-b", "op-c"]) + shard_rows(5, ["op-d"])
    assert anchor.check_shards(after, [], 16, single)[0] == []
    rewritten = shard_rows(0, ["op-x", "op-b", "op-c"])
    problems = anchor.check_shards(rewritten, [], 16, single)[0]
    assert any("rewritten" in p.problem for p in problems)
