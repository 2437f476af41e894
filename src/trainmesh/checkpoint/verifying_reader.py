"""DCP's file reader with each item checked against its digest before this rank reads any.

Its own module because subclassing ``FileSystemReader`` imports torch's distributed checkpoint
(and DTensor, sympy: about a second), which ``import trainmesh`` must not pay for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch.distributed.checkpoint import FileSystemReader
from torch.futures import Future

from trainmesh.checkpoint.digest import DamagedCheckpoint
from trainmesh.checkpoint.shard_digest import damaged_item


class VerifyingReader(FileSystemReader):
    """DCP's file reader, checking every item this rank's plan reads before reading any of them."""

    def __init__(self, path: Path, digests: dict[str, Any] | None) -> None:
        super().__init__(str(path))
        self.directory, self.digests = path, digests

    def read_data(self, plan: Any, planner: Any) -> Future[None]:
        items = []
        for item in plan.items:
            info = self.storage_data[item.storage_index]
            items.append((info.relative_path, info.offset, info.length, item.storage_index.fqn))
        bad = damaged_item(self.directory, items, self.digests)
        if bad is not None:
            raise DamagedCheckpoint(bad)
        return super().read_data(plan, planner)
