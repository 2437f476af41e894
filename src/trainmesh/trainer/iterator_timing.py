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

A module written for 1.x (it defines a hook 2.0 removed) runs as 1.9.5 orders it; others as 2.x.
"""

from typing import Any

from trainmesh.model_configuration import is_lightning1_module


def iterator_after_epoch_start(module: Any) -> bool:
    """Whether the stage's iterator is made after its epoch-start hook (1.9.5) rather than before its start hook."""
    return is_lightning1_module(module)
