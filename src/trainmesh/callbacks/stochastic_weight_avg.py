"""``StochasticWeightAveraging``, as Lightning 2.6 defines it (its ``callbacks/stochastic_weight_avg.py``):
from epoch ``swa_epoch_start`` (an int counted from 1, or a fraction of ``max_epochs``) the
optimizer's scheduler is swapped for torch's ``SWALR`` (annealing to ``swa_lrs`` over
``annealing_epochs``, ``"cos"`` or ``"linear"``), and at each epoch's start from then on the
model's parameters are averaged into a copy (``avg_fn``; by default the running mean); after the
last epoch the model holds the averaged parameters. The average, its count and the scheduler's
state are kept in the checkpoint.

A model with batch-norm layers gets Lightning's extra epoch: the fit is lengthened by one
(``trainer.fit_loop.max_epochs += 1`` as it starts), and at that epoch's start the averaged weights
go into the model, the layers' running statistics are reset (momentum None: a cumulative mean) and
the epoch runs forward only: every batch's training_step and hooks, no zero_grad and no backward
(the loop's switch, ``trainer.fit_loop._skip_backward``), the accumulation window made the epoch's
length so that the optimizer steps once, at its last batch, as Lightning's. ``on_train_end`` puts
the limits and the momenta back. A strategy that shards parameters is refused (as Lightning).

>>> swa = StochasticWeightAveraging(swa_lrs=1e-2, swa_epoch_start=2, annealing_epochs=1)
"""

from __future__ import annotations

from collections.abc import Callable
from copy import deepcopy
from typing import Any, Literal

import torch
from torch import Tensor, nn
from torch.optim.swa_utils import SWALR

from trainmesh.callbacks.base import Callback
from trainmesh.trainer_view import TrainerView
from trainmesh.utilities.exceptions import MisconfiguredValue  # Lightning's exception, and the ValueError it was
from trainmesh.utilities.rank_zero import rank_zero_info, rank_zero_warn
from trainmesh.utilities.types import LRSchedulerConfig

AverageFunction = Callable[[Tensor, Tensor, Tensor], Tensor]
_CPU = torch.device("cpu")  # Lightning's default for where the average is kept


class StochasticWeightAveraging(Callback):
    """Average the model's weights over the last epochs of training (SWA; see the module's docstring).

    Args:
        swa_lrs: the learning rate SWALR anneals to: a positive float for every parameter group, or a list of one per group.
        swa_epoch_start: the epoch averaging starts at: an int counted from 1, or a float in [0, 1], that fraction of ``max_epochs`` (default ``0.8``).
        annealing_epochs: epochs over which SWALR anneals the learning rate to ``swa_lrs`` (default ``10``).
        annealing_strategy: ``"cos"`` or ``"linear"`` annealing (default ``'cos'``).
        avg_fn: ``(averaged, current, n_averaged) -> new average`` for each parameter (None: the running mean) (default ``None``).
        device: where the averaged copy of the model is kept (None: the model's device) (default ``torch.device('cpu')``).

    Examples:
        >>> swa = StochasticWeightAveraging(swa_lrs=1e-2, swa_epoch_start=0.75, annealing_epochs=2)
        >>> # Trainer(max_epochs=20, callbacks=[swa]): averages from the 15th epoch on
    """

    def __init__(
        self,
        swa_lrs: float | list[float],
        swa_epoch_start: int | float = 0.8,
        annealing_epochs: int = 10,
        annealing_strategy: Literal["cos", "linear"] = "cos",
        avg_fn: AverageFunction | None = None,
        device: torch.device | str | None = _CPU,
    ) -> None:
        _check_arguments(swa_lrs, swa_epoch_start, avg_fn, device)
        self.n_averaged: Tensor | None = None
        self._swa_epoch_start = swa_epoch_start
        self._swa_lrs = swa_lrs
        self._annealing_epochs = annealing_epochs
        self._annealing_strategy = annealing_strategy
        self._avg_fn = avg_fn or self.avg_fn
        self._device = device
        self._average_model: nn.Module | None = None
        self._initialized = False
        self._swa_scheduler: Any = None
        self._scheduler_state: dict[str, Any] | None = None
        self._init_n_averaged = 0
        self._latest_update_epoch = -1
        self._max_epochs: int = -1
        self._model_contains_batch_norm: bool | None = None
        self._accumulate_grad_batches = 1  # the Trainer's, kept during the batch-norm epoch
        self.momenta: dict[nn.modules.batchnorm._BatchNorm, float | None] = {}

    @property
    def swa_start(self) -> int:
        assert isinstance(self._swa_epoch_start, int)
        return max(self._swa_epoch_start - 1, 0)  # counted from 0

    @property
    def swa_end(self) -> int | float:
        return float("inf") if self._max_epochs == -1 else self._max_epochs - 1

    @staticmethod
    def pl_module_contains_batch_norm(pl_module: nn.Module) -> bool:
        return any(isinstance(module, nn.modules.batchnorm._BatchNorm) for module in pl_module.modules())

    def setup(self, trainer: TrainerView, pl_module: Any, stage: str) -> None:
        if trainer.runtime.capabilities.shards_parameters:
            raise MisconfiguredValue("SWA does not currently support sharded models.")
        self._average_model = deepcopy(pl_module)  # before the model goes to its device, as Lightning's

    def on_fit_start(self, trainer: TrainerView, pl_module: Any) -> None:
        if len(trainer.optimizers) != 1:
            raise MisconfiguredValue("SWA currently works with 1 `optimizer`.")
        if len(trainer.lr_scheduler_configs) > 1:
            raise MisconfiguredValue("SWA currently not supported for more than 1 `lr_scheduler`.")
        max_epochs = trainer.max_epochs
        assert max_epochs is not None  # a fit has settled it (1000 or -1 where none was given)
        if isinstance(self._swa_epoch_start, float):
            if max_epochs == -1:
                raise MisconfiguredValue(
                    "SWA with `swa_epoch_start` as a float is not supported when `max_epochs=-1`. "
                    "Please provide `swa_epoch_start` as an integer."
                )
            self._swa_epoch_start = int(max_epochs * self._swa_epoch_start)
        self._model_contains_batch_norm = self.pl_module_contains_batch_norm(pl_module)
        self._max_epochs = max_epochs
        if self._model_contains_batch_norm and max_epochs != -1:
            # one more epoch, to recompute the batch-norm statistics for the averaged weights
            trainer.fit_loop.max_epochs += 1
        if self._scheduler_state is not None:  # resumed: the SWA scheduler comes back at its epoch
            trainer.lr_scheduler_configs.clear()

    def on_train_epoch_start(self, trainer: TrainerView, pl_module: Any) -> None:
        epoch = trainer.current_epoch
        if not self._initialized and self.swa_start <= epoch <= self.swa_end:
            self._initialized = True
            self._start_averaging(trainer, pl_module)
        if self.swa_start <= epoch <= self.swa_end and epoch > self._latest_update_epoch:
            assert self.n_averaged is not None and self._average_model is not None
            self.update_parameters(self._average_model, pl_module, self.n_averaged, self._avg_fn)
            self._latest_update_epoch = epoch
        # not ">": the callback may be saved with the model and training go on (Lightning's note)
        if self._max_epochs != -1 and epoch == self.swa_end + 1:
            self._start_batch_norm_epoch(trainer, pl_module)

    def _start_batch_norm_epoch(self, trainer: TrainerView, pl_module: Any) -> None:
        """The averaged weights into the model, its batch-norm statistics reset, and this epoch run
        forward only, its optimizer step held back by a window one batch longer than the epoch."""
        assert self._average_model is not None
        self.transfer_weights(self._average_model, pl_module)
        self.reset_batch_norm_and_save_state(pl_module)
        fit_loop = trainer.fit_loop
        _check_counted(fit_loop.max_batches)  # a loader reloaded without a length since on_train_start
        fit_loop.max_batches += 1
        fit_loop._skip_backward = True
        self._accumulate_grad_batches = trainer.accumulate_grad_batches
        trainer.accumulate_grad_batches = fit_loop.max_batches

    def on_train_start(self, trainer: TrainerView, pl_module: Any) -> None:
        """Before any batch: the batch-norm epoch needs the loader's count (Lightning's assertion only
        fails when that epoch starts, after the whole training)."""
        if self._model_contains_batch_norm and self._max_epochs != -1:
            _check_counted(trainer.num_training_batches)

    def on_train_epoch_end(self, trainer: TrainerView, *args: Any) -> None:
        trainer.fit_loop._skip_backward = False

    def _start_averaging(self, trainer: TrainerView, pl_module: Any) -> None:
        """The average's device, and SWALR in the scheduler's place (or added where there is none)."""
        assert self._average_model is not None
        self._average_model = self._average_model.to(self._device or pl_module.device)
        optimizer = trainer.optimizers[0]  # the program's own, as Lightning's
        if isinstance(self._swa_lrs, float):
            self._swa_lrs = [self._swa_lrs] * len(optimizer.param_groups)
        for lr, group in zip(self._swa_lrs, optimizer.param_groups, strict=False):
            group["initial_lr"] = lr
        self._swa_scheduler = SWALR(
            optimizer,
            swa_lr=self._swa_lrs,  # type: ignore[arg-type]  # one per param group, as torch accepts
            anneal_epochs=self._annealing_epochs,
            anneal_strategy=self._annealing_strategy,
            last_epoch=trainer.max_epochs if self._annealing_strategy == "cos" else -1,
        )
        if self._scheduler_state is not None:
            self._swa_scheduler.load_state_dict(self._scheduler_state)
        elif trainer.current_epoch != self.swa_start:
            rank_zero_warn(
                "SWA is initializing after swa_start without any checkpoint data. "
                "This may be caused by loading a checkpoint from an older version of PyTorch Lightning."
            )
        config = LRSchedulerConfig(self._swa_scheduler)  # every epoch
        if trainer.lr_scheduler_configs:
            replaced = trainer.lr_scheduler_configs[0]
            if replaced.interval != "epoch" or replaced.frequency != 1:
                rank_zero_warn(f"SWA is currently only supported every epoch. Found {replaced}")
            rank_zero_info(
                f"Swapping scheduler `{type(replaced.scheduler).__name__}` for `{type(self._swa_scheduler).__name__}`"
            )
            trainer.lr_scheduler_configs[0] = config
        else:
            trainer.lr_scheduler_configs.append(config)
        if self.n_averaged is None:
            self.n_averaged = torch.tensor(self._init_n_averaged, dtype=torch.long, device=pl_module.device)

    def on_train_end(self, trainer: TrainerView, pl_module: Any) -> None:
        """After the batch-norm epoch, the limits and momenta as they were; else the averaged
        parameters into the model, where the last epoch averaged (current_epoch counts it done)."""
        bn_epoch_done = trainer.current_epoch - 1 == self.swa_end + 1
        if self._model_contains_batch_norm and self._max_epochs != -1 and bn_epoch_done:
            trainer.accumulate_grad_batches = self._accumulate_grad_batches
            fit_loop = trainer.fit_loop
            fit_loop.max_batches -= 1
            fit_loop.max_epochs -= 1
            self.reset_momenta()
        elif trainer.current_epoch - 1 == self.swa_end or self._max_epochs == -1:
            if self._average_model is not None:
                self.transfer_weights(self._average_model, pl_module)

    @staticmethod
    def transfer_weights(src_pl_module: nn.Module, dst_pl_module: nn.Module) -> None:
        for src, dst in zip(src_pl_module.parameters(), dst_pl_module.parameters(), strict=False):
            dst.detach().copy_(src.to(dst.device))

    def reset_batch_norm_and_save_state(self, pl_module: Any) -> None:
        """Lightning's (from torch 1.7's ``swa_utils``): fresh running statistics, the momenta kept aside."""
        self.momenta = {}
        for module in pl_module.modules():
            if not isinstance(module, nn.modules.batchnorm._BatchNorm):
                continue
            assert module.running_mean is not None and module.running_var is not None
            mean, var = module.running_mean, module.running_var
            module.running_mean = torch.zeros_like(mean, device=pl_module.device, dtype=mean.dtype)
            module.running_var = torch.ones_like(var, device=pl_module.device, dtype=var.dtype)
            self.momenta[module] = module.momentum
            module.momentum = None  # torch's: None is a cumulative mean
            assert module.num_batches_tracked is not None
            module.num_batches_tracked *= 0

    def reset_momenta(self) -> None:
        for module, momentum in self.momenta.items():
            module.momentum = momentum

    @staticmethod
    def update_parameters(
        average_model: nn.Module, model: nn.Module, n_averaged: Tensor, avg_fn: AverageFunction
    ) -> None:
        """Adapted, as Lightning's, from torch 1.7's ``swa_utils``."""
        for p_swa, p_model in zip(average_model.parameters(), model.parameters(), strict=False):
            device = p_swa.device
            p_swa_ = p_swa.detach()
            p_model_ = p_model.detach().to(device)
            src = p_model_ if n_averaged == 0 else avg_fn(p_swa_, p_model_, n_averaged.to(device))
            p_swa_.copy_(src)
        n_averaged += 1

    @staticmethod
    def avg_fn(averaged_model_parameter: Tensor, model_parameter: Tensor, num_averaged: Tensor) -> Tensor:
        return averaged_model_parameter + (model_parameter - averaged_model_parameter) / (num_averaged + 1)

    def state_dict(self) -> dict[str, Any]:
        return {
            "n_averaged": 0 if self.n_averaged is None else self.n_averaged.item(),
            "latest_update_epoch": self._latest_update_epoch,
            "scheduler_state": None if self._swa_scheduler is None else self._swa_scheduler.state_dict(),
            "average_model_state": None if self._average_model is None else self._average_model.state_dict(),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._init_n_averaged = state_dict["n_averaged"]
        self._latest_update_epoch = state_dict["latest_update_epoch"]
        self._scheduler_state = state_dict["scheduler_state"]
        if self._average_model is not None:
            self._average_model.load_state_dict(state_dict["average_model_state"])


def _check_counted(batches: int | float) -> None:
    if not isinstance(batches, int):
        raise ValueError(
            "StochasticWeightAveraging on a model with batch norm needs a train loader with a length: after the "
            "averaging it runs one more epoch, forward only, whose optimizer step waits for the epoch's last batch "
            "(Lightning 2.6 stops there: 'Iterable-style datasets are not supported'). Give the dataset a __len__, "
            "set Trainer(limit_train_batches=<int>), or average with torch.optim.swa_utils (AveragedModel, update_bn) in "
            "a callback of your own"
        )


def _check_arguments(swa_lrs: Any, swa_epoch_start: Any, avg_fn: Any, device: Any) -> None:
    """Lightning's checks, with its messages."""
    message = "swa_epoch_start should be a >0 integer or a float between 0 and 1."
    if isinstance(swa_epoch_start, int) and swa_epoch_start < 1:
        raise MisconfiguredValue(message)
    if isinstance(swa_epoch_start, float) and not 0 <= swa_epoch_start <= 1:
        raise MisconfiguredValue(message)
    wrong_type = not isinstance(swa_lrs, (float, list))
    wrong_float = isinstance(swa_lrs, float) and swa_lrs <= 0
    wrong_list = isinstance(swa_lrs, list) and not all(lr > 0 and isinstance(lr, float) for lr in swa_lrs)
    if wrong_type or wrong_float or wrong_list:
        raise MisconfiguredValue("The `swa_lrs` should a positive float, or a list of positive floats")
    if avg_fn is not None and not callable(avg_fn):
        raise MisconfiguredValue("The `avg_fn` should be callable.")
    if device is not None and not isinstance(device, (torch.device, str)):
        raise MisconfiguredValue(f"device is expected to be a torch.device or a str. Found {device}")
