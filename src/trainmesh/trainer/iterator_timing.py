"""When a stage's data iterator is made, which decides what torch's generator holds in each hook.

Making a loader's iterator draws from torch's global generator (the DataLoader's base seed; a
shuffling sampler's seed too where workers read ahead), so a hook that builds a model or samples
(a callback making a new VAE in ``on_validation_start``) gets other numbers depending on whether
the iterator was made before it. The owners order it differently:

- Lightning 2.x makes the iterator before the stage's hooks (``on_train_start``,
  ``on_validation_start`` see the generator after its draws);
- pytorch-lightning 1.9.5 makes it in the loop's first advance, after the epoch-start hook
  (``on_train_epoch_start``, ``on_validation_epoch_start``: ``loops/dataloader/evaluation_loop.py``
  ``advance``, ``loops/epoch/training_epoch_loop.py`` ``reset`` / ``on_run_start``).

A train loader asked for again (``reload_dataloaders_every_n_epochs``) is the same story: Lightning 2.x's
``setup_data`` starts an iterator of the new loader before the epoch starts another; 1.9.5 starts only the
epoch's, so every epoch after a reload shuffles with other numbers.

A run written for 1.x (its module defines a hook 2.0 removed, or its Trainer was built with a spelling
only 1.x has: ``lightning1/trainer_members.py``) runs as 1.9.5 orders it; others as 2.x.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainmesh.trainer.loop_context import LoopContext


def makes_iterators_as_1_9(ctx: LoopContext) -> bool:
    """Whether the stage's iterator is made after its epoch-start hook, and a reloaded train loader's only by its
    epoch (1.9.5), rather than before the start hook and once more at the reload (2.x)."""
    return ctx.lightning1
