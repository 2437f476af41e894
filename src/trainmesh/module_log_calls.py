"""The Module's logging calls, ``self.log``, ``self.log_dict`` and 1.x's ``log_grad_norm``, with
Lightning's arguments in Lightning's order: each call goes to the module's host (the running
Trainer's log collector, or the Fabric that set the module up: ``module_host.py``), which checks it
(``module_logging.py``) and records it. ``self.log``'s common call, a step value logged again with
the same arguments, is stored here directly, without building the options (a Python call fewer a step).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from torch import nn

from trainmesh.model_configuration import lightning1_value
from trainmesh.module_host import TRAINER_HOST
from trainmesh.nested_metrics import log_nested

if TYPE_CHECKING:
    from trainmesh.module_host import ModuleHost


class LogCalls(nn.Module):
    """``log``, ``log_dict`` and ``log_grad_norm`` of trainmesh's ``Module`` (which sets ``_host``
    and ``_log_collector``: module.py)."""

    if TYPE_CHECKING:  # the Module's attributes (not annotated at run time: torch.jit.script reads annotations)
        _host: ModuleHost
        _log_collector: Any

    def log(
        self,
        name: str,
        value: Any,
        prog_bar: bool = False,
        logger: bool | None = None,
        on_step: bool | None = None,
        on_epoch: bool | None = None,
        reduce_fx: str | Any = "mean",
        enable_graph: bool = False,
        sync_dist: bool = False,
        sync_dist_group: Any = None,
        add_dataloader_idx: bool = True,
        batch_size: int | None = None,
        metric_attribute: str | None = None,
        rank_zero_only: bool = False,
    ) -> None:
        """Record a metric for the loggers, the progress bar and ``trainer.callback_metrics``
        (Lightning's arguments, in Lightning's order).

        In ``training_step`` the default is per step; in validation and test, per epoch. Epoch
        values are batch-size-weighted means (or ``reduce_fx``: "sum", "max", "min").
        ``value`` may be a number, a scalar tensor or a torchmetrics ``Metric``.

        Args:
            name: the metric's key.
            value: a number, a scalar tensor or a torchmetrics ``Metric``.
            prog_bar: show it in the progress bar.
            logger: send it to the loggers (default ``True``).
            on_step: record the step's value (default: in ``training_step``).
            on_epoch: record the epoch's reduced value (default: outside ``training_step``).
            reduce_fx: how the epoch value is reduced: "mean", "sum", "max", "min" (or torch's).
            enable_graph: accepted for Lightning's programs: values are stored detached, which
                changes no logged number.
            sync_dist: reduce the epoch value across processes.
            sync_dist_group: a torch process group to reduce over (``None``: every data-parallel process).
            add_dataloader_idx: with several evaluation loaders, append ``/dataloader_idx_N`` to
                the name (``False``: the name as given; each loader must then log its own names,
                as Lightning requires).
            batch_size: the weight of this batch in the epoch mean (default: read from the batch).
            metric_attribute: the module's attribute holding a logged ``Metric``; without it the
                Metric must be one of the module's submodules (else ``MisconfigurationException``,
                as in Lightning).
            rank_zero_only: accepted for Lightning's programs (a value logged only on rank 0 is
                not synced; trainmesh syncs only with ``sync_dist=True``).

        Examples:
            >>> # self.log("val_loss", loss, prog_bar=True, sync_dist=True)
        """
        collector = self._log_collector
        if collector is not None and self._host is TRAINER_HOST and reduce_fx == "mean" and not collector.barebones:
            # The common call, a step value of a name this hook logged before with the same arguments,
            # stored without building the options (what TrainerHost.log and LogCollector.log do with them)
            entry = collector.results.entries.get(name)
            shown = True if logger is None else logger
            given = (prog_bar, shown, on_step, on_epoch, "mean", sync_dist, add_dataloader_idx, rank_zero_only)
            if (
                entry is not None
                and entry.plain_step
                and entry.fx == collector.fx
                and entry.given == given
                and sync_dist_group is None
                and metric_attribute is None
                and collector.stored_step(name, value)
            ):
                return
        options = {  # Lightning's arguments but name and value (enable_graph: values are stored detached)
            "prog_bar": prog_bar,
            "logger": logger,
            "on_step": on_step,
            "on_epoch": on_epoch,
            "reduce_fx": reduce_fx,
            "sync_dist": sync_dist,
            "sync_dist_group": sync_dist_group,
            "add_dataloader_idx": add_dataloader_idx,
            "batch_size": batch_size,
            "metric_attribute": metric_attribute,
            "rank_zero_only": rank_zero_only,
        }
        if isinstance(value, Mapping):  # a 1.x module's: 1.9.5's nested metric (2.x refuses it: metric_values)
            return log_nested(self, name, value, options)
        self._host.log(self, name, lightning1_value(self, name, value), options)  # 1.x: 1.9.5's conversions

    def log_dict(
        self,
        dictionary: Mapping[str, Any],
        prog_bar: bool = False,
        logger: bool | None = None,
        on_step: bool | None = None,
        on_epoch: bool | None = None,
        reduce_fx: str | Any = "mean",
        enable_graph: bool = False,
        sync_dist: bool = False,
        sync_dist_group: Any = None,
        add_dataloader_idx: bool = True,
        batch_size: int | None = None,
        rank_zero_only: bool = False,
    ) -> None:
        """``self.log`` for each item of ``dictionary`` with the same options (Lightning's
        arguments, in Lightning's order)."""
        options = dict(locals())
        del options["self"], options["dictionary"]
        self._host.log_dict(self, dictionary, options)

    def log_grad_norm(self, grad_norm_dict: dict[str, float]) -> None:
        """Lightning 1.x's: with ``Trainer(track_grad_norm=p)`` called at each optimizer step, before
        clipping, with the gradients' p-norms (``{"grad_2.0_norm/<param>": ..., "grad_2.0_norm_total": ...}``);
        logs them on step and epoch, as pytorch-lightning 1.9.5's default. Override it to log otherwise."""
        self.log_dict(grad_norm_dict, on_step=True, on_epoch=True, prog_bar=False, logger=True)
