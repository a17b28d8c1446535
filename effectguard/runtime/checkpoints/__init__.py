"""Checkpoint stores: where a run's state is kept between steps and between processes."""

from effectguard.runtime.checkpoints.sqlite import SQLiteCheckpointStore
from effectguard.runtime.checkpoints.store import (
    CheckpointStore,
    InMemoryCheckpointStore,
    encode_record,
)

__all__ = ["CheckpointStore", "InMemoryCheckpointStore", "SQLiteCheckpointStore", "encode_record"]
