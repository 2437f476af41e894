"""``WeightAveraging`` and ``EMAWeightAveraging``, as Lightning 2.6 defines them (its
``callbacks/weight_averaging.py``): a ``torch.optim.swa_utils.AveragedModel`` of the module, made at
fit's ``setup``, updated after each optimizer step where ``should_update(step_idx=...)`` says so
(and after each epoch where ``should_update(epoch_idx=...)`` does); validation runs on the averaged
weights (swapped in for each validation epoch), and after training the module holds them. A
checkpoint holds the averaged weights as ``state_dict``, the current ones as
``current_model_state`` and the average's count as ``averaging_state``; a resumed fit restores
both.

>>> ema = EMAWeightAveraging(decay=0.99, update_starting_at_step=10)

Refused before training: a strategy that shards parameters (the average is a whole copy of the
module, and sharded pieces would be averaged as if they were the whole).
"""

from __future__ import annotations

import itertools
from copy import deepcopy
from typing import Any

import torch
from torch.optim.swa_utils import AveragedModel, get_ema_avg_fn

from trainmesh.callbacks.base import Callback
from trainmesh.trainer_view import TrainerView
from trainmesh.utilities.model_helpers import is_overridden
from trainmesh.utilities.rank_zero import rank_zero_info, rank_zero_warn


class WeightAveraging(Callback):
    """Keep an average of the module's weights during fit (SWA by default; EMA with an ``avg_fn``).

    Args:
        device: where the ``AveragedModel`` is kept (None: the module's device) (default ``None``).
        use_buffers: average the buffers too (default ``True``; ``False`` as ``AveragedModel``'s default).
        **kwargs: passed to ``AveragedModel`` (``avg_fn``, ``multi_avg_fn``).

    Examples:
        >>> from torch.optim.swa_utils import get_ema_avg_fn
        >>> class EMAAfter100(WeightAveraging):
        ...     def __init__(self):
        ...         super().__init__(avg_fn=get_ema_avg_fn())
        ...
        ...     def should_update(self, step_idx=None, epoch_idx=None):
        ...         return step_idx is not None and step_idx >= 100
        >>> # Trainer(callbacks=[EMAAfter100()]).fit(model): the module holds the average after fit
    """

    def __init__(self, device: torch.device | str | int | None = None, use_buffers: bool = True, **kwargs: Any) -> None:
        self._device = torch.device(device) if isinstance(device, str) else device
        self._use_buffers = use_buffers
        self._kwargs = kwargs
        self._average_model: AveragedModel | None = None
        # The optimizer steps when last updated: 0 so that the first update follows the first step
        # (after N batches under accumulate_grad_batches=N), as Lightning's.
        self._latest_update_step = 0
        self._latest_update_epoch = -1

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        """Whether to update the average after the optimizer step ``step_idx`` (from 0), or after the
        epoch ``epoch_idx``; by default after every step."""
        return step_idx is not None

    def setup(self, trainer: TrainerView, pl_module: Any, stage: str) -> None:
        if stage != "fit":
            return
        if trainer.runtime.capabilities.shards_parameters:
            raise ValueError(
                "WeightAveraging with a strategy that shards parameters: the average is a whole copy of the module, "
                "and each rank holds only its shards. Use ddp (or one device) with weight averaging."
            )
        if is_overridden("configure_model", pl_module):
            rank_zero_warn(
                "You're using the WeightAveraging callback with a model that overrides the configure_model "
                "callback. WeightAveraging doesn't support sharding model layers, so you may run out of memory."
            )
            pl_module.configure_model()
        device = self._device or pl_module.device
        self._average_model = AveragedModel(pl_module, device=device, use_buffers=self._use_buffers, **self._kwargs)

    def on_train_batch_end(
        self, trainer: TrainerView, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        step_idx = trainer.global_step - 1  # zero-based, as epoch_idx
        if trainer.global_step > self._latest_update_step and self.should_update(step_idx=step_idx):
            assert self._average_model is not None
            self._average_model.update_parameters(pl_module)
            self._latest_update_step = trainer.global_step

    def on_train_epoch_end(self, trainer: TrainerView, pl_module: Any) -> None:
        if trainer.current_epoch > self._latest_update_epoch and self.should_update(epoch_idx=trainer.current_epoch):
            assert self._average_model is not None
            self._average_model.update_parameters(pl_module)
            self._latest_update_epoch = trainer.current_epoch

    def on_train_end(self, trainer: TrainerView, pl_module: Any) -> None:
        assert self._average_model is not None
        self._copy_average_to_current(pl_module)

    def on_validation_epoch_start(self, trainer: TrainerView, pl_module: Any) -> None:
        if self._average_model is not None:
            self._swap_models(pl_module)

    def on_validation_epoch_end(self, trainer: TrainerView, pl_module: Any) -> None:
        if self._average_model is not None:
            self._swap_models(pl_module)

    def state_dict(self) -> dict[str, Any]:
        return {"latest_update_step": self._latest_update_step}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._latest_update_step = state_dict["latest_update_step"]

    def on_save_checkpoint(self, trainer: TrainerView, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        if self._average_model is None:
            rank_zero_info(
                "You're using the WeightAveraging callback, but saving a checkpoint outside the 'fit' stage. The state "
                "of the WeightAveraging callback won't be saved in the checkpoint. If training has finished, the "
                "average model parameters will be saved to the state_dict in the checkpoint."
            )
            return
        average_state = self._average_model.state_dict()
        checkpoint["current_model_state"] = checkpoint["state_dict"]
        # The AveragedModel's names carry "module." before the module's own
        checkpoint["state_dict"] = {
            name[7:]: value for name, value in average_state.items() if name.startswith("module.")
        }
        checkpoint["averaging_state"] = {k: v for k, v in average_state.items() if not k.startswith("module.")}

    def on_load_checkpoint(self, trainer: TrainerView, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        if self._average_model is None:
            rank_zero_warn(
                "You're using the WeightAveraging callback, but loading a checkpoint outside the 'fit' stage. The "
                "WeightAveraging state cannot be restored. If you're using the checkpoint for prediction or testing, "
                "you can ignore this warning. To disable the warning, remove the WeightAveraging callback."
            )
        elif "current_model_state" in checkpoint and "averaging_state" in checkpoint:
            rank_zero_info("Found current_model_state in the checkpoint. This will be used to initialize the model.")
            average_state = {"module." + name: value for name, value in checkpoint["state_dict"].items()}
            average_state |= checkpoint["averaging_state"]
            self._average_model.load_state_dict(average_state)
            # The module was loaded from "state_dict" (the average): its own weights are these
            pl_module.load_state_dict(checkpoint["current_model_state"])
        else:
            rank_zero_warn(
                "The checkpoint was not created with WeightAveraging. Both the current and the average model will be "
                "initialized with state_dict."
            )
            self._average_model.module.load_state_dict(deepcopy(checkpoint["state_dict"]), strict=False)

    def _pairs(self, pl_module: Any) -> Any:
        assert self._average_model is not None
        average = self._average_model.module
        return zip(
            itertools.chain(average.parameters(), average.buffers()),
            itertools.chain(pl_module.parameters(), pl_module.buffers()),
        )

    def _swap_models(self, pl_module: Any) -> None:
        for average_param, current_param in self._pairs(pl_module):
            kept = average_param.data.clone()
            average_param.data.copy_(current_param.data)
            current_param.data.copy_(kept)

    def _copy_average_to_current(self, pl_module: Any) -> None:
        for average_param, current_param in self._pairs(pl_module):
            current_param.data.copy_(average_param.data)


class EMAWeightAveraging(WeightAveraging):
    """An exponential moving average of the weights (Lightning 2.6's ``EMAWeightAveraging``).

    Args:
        device: where the average is kept (None: the module's device) (default ``None``).
        use_buffers: average the buffers too (default ``True``).
        decay: the average's decay per update (default ``0.999``).
        update_every_n_steps: update after every this many optimizer steps (default ``1``).
        update_starting_at_step: the first step (from 0) to update after (None: from the first) (default ``None``).
        update_starting_at_epoch: update after each epoch from this one on (None: never by epoch) (default ``None``).
        **kwargs: passed to ``AveragedModel``.

    Examples:
        >>> ema = EMAWeightAveraging(decay=0.99, update_every_n_steps=2)
        >>> # Trainer(callbacks=[ema]).fit(model): validation and the trained module use the average
    """

    def __init__(
        self,
        device: torch.device | str | int | None = None,
        use_buffers: bool = True,
        decay: float = 0.999,
        update_every_n_steps: int = 1,
        update_starting_at_step: int | None = None,
        update_starting_at_epoch: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(device=device, use_buffers=use_buffers, **kwargs, avg_fn=get_ema_avg_fn(decay=decay))
        self.update_every_n_steps = update_every_n_steps
        self.update_starting_at_step = update_starting_at_step
        self.update_starting_at_epoch = update_starting_at_epoch

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        if step_idx is not None:
            starting = self.update_starting_at_step is None or step_idx >= self.update_starting_at_step
            if starting and self.update_every_n_steps > 0 and step_idx % self.update_every_n_steps == 0:
                return True
        start_epoch = self.update_starting_at_epoch
        return epoch_idx is not None and start_epoch is not None and epoch_idx >= start_epoch
