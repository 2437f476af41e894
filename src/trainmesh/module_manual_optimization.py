"""The Module's manual-optimization calls (``self.optimizers()``, ``manual_backward``,
``toggle_optimizer``, ``clip_gradients``, ...), used in ``training_step`` once a module sets
``self.automatic_optimization = False``: each goes through the module's host (the running Trainer,
or the Fabric that set the module up: ``module_host.py``) or ``manual_calls.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from trainmesh import manual_calls

if TYPE_CHECKING:
    from trainmesh.module_host import ModuleHost
    from trainmesh.trainer_view import TrainerView


class ManualOptimization(nn.Module):
    """The manual-optimization members of trainmesh's ``Module`` (which sets ``_host`` and
    ``trainer``: module.py)."""

    if TYPE_CHECKING:  # the Module's (not annotated at run time: torch.jit.script reads annotations)
        _host: ModuleHost

        @property
        def trainer(self) -> TrainerView: ...

    # Set ``self.automatic_optimization = False`` to step the optimizers in training_step. Not annotated:
    # torch.jit.script reads this class's annotations for a module's attributes, and this module's are
    # strings (``from __future__ import annotations``) it cannot resolve: to_torchscript() failed on a
    # module that set it ("Unknown type annotation: 'bool'"); the value's type is inferred instead.
    automatic_optimization = True

    def optimizers(self, use_pl_optimizer: bool = True) -> Any:
        """The optimizer (a list when configure_optimizers made several); ``step()`` goes through
        the precision and the strategy, and counts in ``global_step``."""
        return self._host.optimizers(self, use_pl_optimizer)

    def lr_schedulers(self) -> Any:
        """The scheduler (a list when there are several, None without); step them yourself."""
        return manual_calls.lr_schedulers_of(self.trainer)

    def manual_backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """``loss.backward(*args, **kwargs)`` through the precision (loss scaling), the strategy (DDP's
        sync) and the module's ``backward`` hook."""
        self._host.manual_backward(self, loss, args, kwargs)

    def no_backward_sync(self, enabled: bool = True) -> Any:
        """Inside, ``manual_backward`` accumulates gradients locally, without the all-reduce."""
        return self.trainer.runtime.no_backward_sync(self.trainer.model, enabled=enabled)

    def toggle_optimizer(self, optimizer: Any) -> None:
        """Turn off requires_grad of every parameter the other optimizers hold (until untoggle)."""
        manual_calls.toggle_module(self, optimizer)

    def untoggle_optimizer(self, optimizer: Any) -> None:
        manual_calls.untoggle_module(self)

    def clip_gradients(
        self, optimizer: Any, gradient_clip_val: float | None = None, gradient_clip_algorithm: str | None = None
    ) -> torch.Tensor | None:
        """Clip the gradients of ``optimizer``'s parameters (their global norm across devices, or by
        value) before ``optimizer.step()``; None takes the Trainer's setting, as in Lightning."""
        return self._host.clip_gradients(self, optimizer, gradient_clip_val, gradient_clip_algorithm)
