"""What the Trainer's data-parallel ranks train on, as one sampler: the reference data of tests
that compare a data-parallel run with one process at the global batch.

Under its default ``use_distributed_sampler=True``, Lightning 2.6's Trainer, and trainmesh's
(tests/trainer/test_lightning_sampler_ddp.py), gives every training loader
``DistributedSampler(shuffle=True, seed=seed)`` (a new permutation each epoch, through
``set_epoch``) whatever the loader's own sampler, so a ``shuffle=False`` loader is not read in
order. ``GlobalBatches`` yields, at step k, the ranks' k-th batches one after another (the first
rank's first): read at ``batch_size * len(ranks)``, one process's step k holds exactly the
samples the ranks' step k held together.

It is itself a ``DistributedSampler``, which the Trainer keeps as it is (as Lightning keeps a
program's own): it also stands for a program's sampler in a distributed run (ddp2's node n: the
batches of ddp ranks 2n and 2n + 1).

>>> list(GlobalBatches(8, world=2, batch_size=2))  # ranks 0 and 1's first batches, then their second
[4, 7, 0, 3, 2, 1, 5, 6]
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from torch.utils.data import DistributedSampler


def rank_batches(samples: int, *, world: int, rank: int, batch_size: int, seed: int = 0, epoch: int = 0) -> list:
    """Rank ``rank``'s training batches (lists of sample indices) in ``epoch``, as the Trainer's
    distributed sampler deals them (padded by repetition to equal counts, no batch dropped)."""
    shard = DistributedSampler(range(samples), num_replicas=world, rank=rank, shuffle=True, seed=seed)  # type: ignore[arg-type]
    shard.set_epoch(epoch)
    order = list(shard)
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


class GlobalBatches(DistributedSampler):
    """One process's order of ``samples`` samples: at step k, the k-th batches of ``ranks`` (all
    ``world`` ranks unless given) of a data-parallel run at ``batch_size`` per rank, shuffled
    with ``seed``; ``set_epoch`` as the ranks' sampler."""

    def __init__(
        self, samples: int, *, world: int, batch_size: int, seed: int = 0, ranks: Sequence[int] | None = None
    ) -> None:
        super().__init__(range(samples), num_replicas=world, rank=0, shuffle=True, seed=seed)  # type: ignore[arg-type]
        self.samples, self.batch_size = samples, batch_size
        self.ranks = list(range(world)) if ranks is None else list(ranks)

    def __iter__(self) -> Iterator[int]:
        shards = [
            rank_batches(
                self.samples,
                world=self.num_replicas,
                rank=r,
                batch_size=self.batch_size,
                seed=self.seed,
                epoch=self.epoch,
            )
            for r in self.ranks
        ]
        return iter([index for step in zip(*shards) for batch in step for index in batch])

    def __len__(self) -> int:
        return self.num_samples * len(self.ranks)
