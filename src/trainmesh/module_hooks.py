"""The hooks of a Module that need nothing of it, with Lightning's defaults (Lightning's
``ModelHooks``): what the Trainer calls around fit, the stages, the batches and the step. The
Trainer calls each only where the Module overrides it, or where its default does work; where
each runs is said in trainmesh.trainer (fit_loop, evaluation, automatic_optimization,
optimization_hooks, legacy_hooks)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from trainmesh.data_hooks import DataHooks
from trainmesh.module_host import host_of


class ModelHooks:
    """Mixed into Module; every default is Lightning's."""

    def setup(self, stage: str) -> None:
        """Called in every process at the start of fit/validate/test/predict, before
        ``configure_model``: build what depends on the data or the process here."""

    def teardown(self, stage: str) -> None: ...
    def on_fit_start(self) -> None: ...
    def on_fit_end(self) -> None: ...
    def on_train_start(self) -> None: ...
    def on_train_end(self) -> None: ...
    def on_train_epoch_start(self) -> None: ...
    def on_train_epoch_end(self) -> None: ...
    def on_train_batch_start(self, batch: Any, batch_idx: int) -> Any: ...
    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None: ...
    # Evaluation's batch hooks get dataloader_idx only where there are several loaders.
    def on_validation_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_test_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_test_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_predict_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_predict_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_test_start(self) -> None: ...
    def on_test_end(self) -> None: ...
    def on_predict_start(self) -> None: ...
    def on_predict_end(self) -> None: ...
    def on_validation_start(self) -> None: ...
    def on_validation_end(self) -> None: ...
    def on_validation_epoch_start(self) -> None: ...
    def on_validation_epoch_end(self) -> None: ...
    def on_test_epoch_start(self) -> None: ...
    def on_test_epoch_end(self) -> None: ...
    def on_predict_epoch_start(self) -> None: ...
    def on_predict_epoch_end(self) -> None: ...
    # Lightning 1.x's epoch-end hooks with the steps' outputs (2.0 removed them): 1.9.5's defaults, which do
    # nothing, so that an override's super().training_epoch_end(outputs) runs; the loop calls overrides only.
    def training_epoch_end(self, outputs: Any) -> None: ...

    # 1.9.5's default (a property there): 0, no splitting; a 1.x program reads it (``if self.truncated_bptt_steps``)
    truncated_bptt_steps: int = 0

    def validation_epoch_end(self, outputs: Any) -> None: ...
    def test_epoch_end(self, outputs: Any) -> None: ...
    def configure_callbacks(self) -> Any:
        """Callbacks this model needs (one or a list), merged with the Trainer's at the start of
        each fit/validate/test/predict: one replaces the Trainer's of its type; checkpoints run last."""
        return []

    def configure_model(self, mesh: Any = None) -> None:
        """Build layers here (instead of ``__init__``) to let sharded strategies create them
        on the meta device and materialize only each process's shard.

        Defined with a ``mesh`` argument, it receives the run's ``ParallelMesh`` (its
        ``device_mesh``, ``submesh("tp")``, ``dp_rank``...), to apply a parallelism of your own
        here, as torchtitan's ``parallelize`` functions do. ``def configure_model(self)`` works too.
        """

    # Lightning's former name of configure_model (Lightning 2.6 still calls it).
    def configure_sharded_model(self) -> None:
        """Lightning's former configure_model: called just before it, in the same context."""

    # Around the step (trainmesh.trainer.optimization_hooks says when each runs): every backward,
    # then where the optimizer steps (gradients unscaled, not yet clipped), then before zero_grad.
    def on_before_backward(self, loss: torch.Tensor) -> None: ...
    def on_after_backward(self) -> None: ...
    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None: ...
    def on_before_zero_grad(self, optimizer: torch.optim.Optimizer) -> None: ...

    # Lightning's optimization hooks (automatic optimization; trainmesh.trainer.automatic_optimization
    # says where each runs). Each default is Lightning's; overriding one replaces that call.
    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """Backpropagate ``loss`` (divided by the accumulation window, scaled under 16-mixed): the
        loop's backward and ``manual_backward``'s, between on_before_backward and on_after_backward.
        Lightning 1.x's override ``backward(self, loss, optimizer, optimizer_idx)`` calling
        ``super().backward(loss, optimizer, optimizer_idx)`` reaches here with 1.x's two arguments, which 1.x's
        default took and did not hand to ``loss.backward``: so here too."""
        if args and hasattr(args[0], "param_groups"):  # an optimizer (or its wrapper): 1.x's (optimizer, optimizer_idx)
            args = args[2:]
        kwargs.pop("optimizer", None), kwargs.pop("optimizer_idx", None)
        host_of(self).backward(self, loss, args, kwargs)  # loss.backward; under Fabric, fabric.backward

    def optimizer_step(
        self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Callable[[], Any] | None = None
    ) -> None:
        """Step ``optimizer`` on a batch that ends an accumulation window. ``optimizer_closure`` runs
        training_step and backward and must run: pass it to ``optimizer.step`` (which then calls
        on_before_optimizer_step and the clipping), or call it yourself to skip the step.

        >>> def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):  # doctest: +SKIP
        ...     for group in optimizer.param_groups:  # linear warm-up over 100 steps
        ...         group["lr"] = 0.1 * min(1.0, (self.trainer.global_step + 1) / 100)
        ...     optimizer.step(closure=optimizer_closure)
        """
        optimizer.step(closure=optimizer_closure)

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: torch.optim.Optimizer) -> None:
        """Zero the gradients at the first batch of each accumulation window (after training_step)."""
        optimizer.zero_grad()

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        """Step one scheduler where its interval and frequency say; ``metric`` is its monitored value
        for ReduceLROnPlateau (or a config with ``"reduce_on_plateau": True``), else None. Override it
        for a scheduler that is not torch's."""
        if metric is None:
            scheduler.step()
        else:
            scheduler.step(metric)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None: ...
    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None: ...

    # Lightning's private batch-transfer calls, which its TensorBoardLogger.log_graph uses on the
    # example input: each hook the running DataModule's where it overrides it, else the Module's.
    def _on_before_batch_transfer(self, batch: Any, dataloader_idx: int = 0) -> Any:
        return _batch_hook(self, "on_before_batch_transfer")(batch, dataloader_idx)

    def _apply_batch_transfer_handler(
        self, batch: Any, device: torch.device | None = None, dataloader_idx: int = 0
    ) -> Any:
        device = device or getattr(self, "device", torch.device("cpu"))
        batch = _batch_hook(self, "transfer_batch_to_device")(batch, device, dataloader_idx)
        return _batch_hook(self, "on_after_batch_transfer")(batch, dataloader_idx)


def _batch_hook(module: Any, name: str) -> Callable[..., Any]:
    """Lightning's ``_call_batch_hook`` rule, outside a loop: the DataModule's ``name`` where it
    overrides DataHooks' default, else the Module's."""
    datamodule = getattr(module.__dict__.get("_trainer"), "datamodule", None)
    if datamodule is not None and getattr(type(datamodule), name, None) is not getattr(DataHooks, name):
        return getattr(datamodule, name)
    return getattr(module, name)
