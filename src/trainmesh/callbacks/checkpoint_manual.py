"""``ModelCheckpoint``'s step-cadence save under manual optimization, as Lightning 2.6 makes it.

Under manual optimization the module steps its optimizers inside ``training_step``, so a save at the
batch's end holds the weights after the step. Lightning 2.6 says so with a warning whose example
keeps ``layer``'s state before the step in ``self.saved_models`` (a dict by ``batch_idx``); where a
module does that (``saved_models`` a non-empty dict and ``layer`` a ``torch.nn.Module``), Lightning
saves ``layer`` with the newest of those states and then puts the module's own state back. A program
that follows the warning gets those checkpoints under trainmesh too (the same weights in them). A
save whose monitored metric is not logged yet waits for the next validation's end, without a warning
(Lightning's ``_defer_save_until_validation``: written there where checkpoints are taken after
validation, dropped where they are taken at the epoch's end).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from trainmesh.trainer_view import TrainerView
from trainmesh.utilities.rank_zero import rank_zero_warn

# Lightning 2.6.6's words (callbacks/model_checkpoint.py, on_train_batch_end)
NO_PRE_STEP_STATE = (
    "Using ModelCheckpoint with manual optimization and every_n_train_steps, but no "
    "pre-optimization state was saved. The checkpoint will contain the model state "
    "AFTER optimization. To save the pre-optimization state, save the model state in "
    "training_step before optimizer.step(). Example:\n"
    "def training_step(self, batch, batch_idx):\n"
    "    # ... forward pass, loss calculation, backward pass ...\n"
    "    # Save model state before optimization\n"
    "    if not hasattr(self, 'saved_models'):\n"
    "        self.saved_models = {}\n"
    "    self.saved_models[batch_idx] = {\n"
    "        k: v.detach().clone() for k, v in self.layer.state_dict().items()\n"
    "    }\n"
    "    # Then perform optimization\n"
    "    optimizer.zero_grad()\n"
    "    self.manual_backward(loss)\n"
    "    optimizer.step()"
)


def save_manual_step(
    monitor: str | None, candidates: dict[str, Any], trainer: TrainerView, pl_module: Any, save: Callable[[], None]
) -> bool:
    """Run ``save`` (the callback's step save) with ``layer`` holding its newest state from before
    the step where the module kept one, else after Lightning's warning (rank 0). True, saving
    nothing, where ``monitor`` is not among ``candidates`` (the callback's ``_monitor_candidates``)
    yet: the caller saves after validation."""
    if monitor is not None and monitor not in candidates:
        return True
    saved = getattr(pl_module, "saved_models", None)
    layer = getattr(pl_module, "layer", None)
    if not (isinstance(saved, dict) and saved and isinstance(layer, torch.nn.Module)):
        if trainer.is_global_zero:
            rank_zero_warn(NO_PRE_STEP_STATE, category=UserWarning)
        save()
        return False
    before = saved[max(saved.keys())]
    with torch.no_grad():
        now = {k: v.detach().clone() for k, v in layer.state_dict().items()}
        try:
            if not isinstance(before, dict):
                raise TypeError("Saved model state must be a dictionary")  # Lightning's words
            layer.load_state_dict(before)
            save()
        finally:
            layer.load_state_dict(now)
    return False
