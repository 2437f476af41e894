"""Whether this process is in a torch.distributed process group: asked on the Trainer side (the log
collector's advice to sync an epoch value) without importing ``utilities.distributed``, Lightning
1.x's module of that name, which a plain fit does not need (``tm.Trainer`` imports neither it nor
its ``AllGatherGrad``: tests/test_import.py)."""

from __future__ import annotations

import torch.distributed as dist


def process_group_exists() -> bool:
    """Whether this process is in a torch.distributed group (Lightning's ``_distributed_is_initialized``):
    a ddp run on one device too."""
    return dist.is_available() and dist.is_initialized()
