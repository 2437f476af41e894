"""What a loader batched by ``batch_size`` reads as its ``batch_size`` and ``drop_last`` once given
its rank's share, against the loader Lightning 2.6 makes again around its ``DistributedSampler``
(``_update_dataloader``, called by its Trainer for every loader under ddp): the user's values (a
program reading ``trainer.train_dataloader.batch_size`` under ddp got None, and ``drop_last`` False).

(A loader given ``batch_sampler=BatchSampler(...)`` is not compared: Lightning makes it again without
its batch sampler and reads batches of 1, its issue #3455 "won't fix"; trainmesh keeps the batches.)"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

pytest.importorskip("lightning.pytorch")

from lightning.fabric.utilities.data import _replace_dunder_methods  # noqa: E402
from lightning.pytorch.trainer.states import RunningStage  # noqa: E402
from lightning.pytorch.utilities.data import _update_dataloader  # noqa: E402

from trainmesh.strategies.sampling import shard_dataloader  # noqa: E402

_DATA = torch.arange(20.0)
# (predict's loader is wrapped again around an index-recording batch sampler, by both)
_STAGES = {"train": RunningStage.TRAINING, "test": RunningStage.TESTING}


def _loader(drop_last: bool) -> DataLoader:
    """Made as a loader hook makes it under Lightning's Trainer, which records the arguments it was
    made with (``_request_dataloader``) to make it again."""
    with _replace_dunder_methods(DataLoader, "dataset"), _replace_dunder_methods(BatchSampler):
        return DataLoader(_DATA, batch_size=3, drop_last=drop_last)


def _told(loader: DataLoader) -> dict[str, Any]:
    return {
        "batch_size": loader.batch_size,
        "drop_last": loader.drop_last,
        "batch_sampler": type(loader.batch_sampler).__name__,
        "batches of": getattr(loader.batch_sampler, "batch_size", None),
        "reads": [batch.tolist() for batch in loader],
    }


@pytest.mark.parametrize("stage", list(_STAGES))
@pytest.mark.parametrize("drop_last", [False, True])
def test_a_shared_out_loader_tells_its_batching_as_lightning_s(stage, drop_last):
    ours = shard_dataloader(_loader(drop_last), dp_rank=1, dp_size=2, train=stage == "train", seed=0)
    share = DistributedSampler(_DATA, num_replicas=2, rank=1, shuffle=False)
    theirs = _update_dataloader(_loader(drop_last), share, mode=_STAGES[stage])
    assert _told(ours) == _told(theirs)
