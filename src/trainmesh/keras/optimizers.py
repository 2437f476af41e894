"""A compiled Keras optimizer as the torch optimizer with the same hyperparameters.

Why torch optimizers, not the Keras one:

- every trainmesh strategy steps a ``torch.optim.Optimizer``: ddp and dp step it after the
  gradients are averaged, zero1 shards its state (``ZeroRedundancyOptimizer``), checkpoints and
  exact resume save its ``state_dict``, schedulers and gradient clipping act on its groups. A
  Keras optimizer (``optimizer.apply(grads, variables)``) is none of these;
- parity with the keras-io guide, whose DDP loop steps ``torch.optim.Adam(model.parameters())``:
  with the torch optimizer a Keras model trains bit for bit as in that loop.

The update rules are torch's, not Keras': for SGD (with momentum and nesterov) they are the
same arithmetic; for Adam and RMSprop epsilon enters differently (Keras adds it to the
uncorrected ``sqrt(v)`` for Adam and under the square root for RMSprop; torch to the
bias-corrected ``sqrt(v)``), so a run is close to, not bit-identical with, Keras' own ``fit``.
Keras' defaults are carried, not torch's: Adam's ``epsilon`` 1e-7 (torch: 1e-8), RMSprop's
``rho`` 0.9 (torch's ``alpha``: 0.99), AdamW's ``weight_decay`` 0.004 (torch: 0.01). The
learning rate is Keras' float32 value read back as the shortest decimal that gives it (0.001,
not 0.0010000000474974513): the number the user wrote.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch

from trainmesh.keras.backend import require_keras

OptimizerFactory = Callable[[Iterable[torch.nn.Parameter]], Any]

_INSTEAD = (
    "pass a torch optimizer instead, e.g. KerasModule(model, optimizer=torch.optim.Adam) or "
    "optimizer=lambda params: torch.optim.Adam(params, lr=1e-3) (a factory may also return "
    "what configure_optimizers returns: ([optimizer], [scheduler])); trainmesh.keras.fit takes that KerasModule in place of the model"
)


def _decimal(value: Any) -> float:
    return float(str(np.float32(float(value))))


def _refuse(what: str, fix: str = _INSTEAD) -> None:
    raise ValueError(f"the Keras optimizer {what} has no torch equivalent trainmesh.keras can map; {fix}")


def _check_options(optimizer: Any, keras: Any) -> None:
    name = type(optimizer).__name__
    if isinstance(optimizer._learning_rate, keras.optimizers.schedules.LearningRateSchedule) or callable(
        optimizer._learning_rate
    ):
        _refuse(
            f"{name} with a learning-rate schedule ({type(optimizer._learning_rate).__name__})",
            "pass optimizer=lambda params: ([torch.optim.Adam(params, lr=...)], [torch.optim.lr_scheduler.ExponentialLR(...)]) "
            "(a torch scheduler), or compile with a constant learning rate",
        )
    if optimizer.global_clipnorm or optimizer.clipvalue:
        _refuse(
            f"{name}(global_clipnorm=/clipvalue=)",
            "compile without it and pass fit(..., gradient_clip_val=X) "
            "(global_clipnorm) or gradient_clip_val=X, gradient_clip_algorithm='value' (clipvalue)",
        )
    if optimizer.clipnorm:
        _refuse(
            f"{name}(clipnorm=) (a norm per variable)",
            "use fit(..., gradient_clip_val=X), which clips by the global norm, or " + _INSTEAD,
        )
    if optimizer.use_ema or optimizer.gradient_accumulation_steps or optimizer.loss_scale_factor:
        _refuse(
            f"{name}(use_ema=/gradient_accumulation_steps=/loss_scale_factor=)",
            "for accumulation pass fit(..., accumulate_grad_batches=N); for loss scaling precision='16-mixed'; or "
            + _INSTEAD,
        )


def torch_optimizer_factory(optimizer: Any) -> OptimizerFactory:
    """A function from parameters to the torch optimizer equivalent to the Keras ``optimizer``."""
    keras = require_keras()
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError(f"{optimizer!r} is not a Keras optimizer")
    _check_options(optimizer, keras)
    config = optimizer.get_config()
    lr = _decimal(config["learning_rate"])
    decay = config.get("weight_decay") or 0.0
    if isinstance(optimizer, keras.optimizers.Adam):  # AdamW is an Adam with weight_decay set
        betas, eps, amsgrad = (config["beta_1"], config["beta_2"]), config["epsilon"], config["amsgrad"]
        if decay:  # Keras decays every optimizer's weights decoupled (w -= lr * wd * w): torch's AdamW
            return lambda params: torch.optim.AdamW(
                params, lr=lr, betas=betas, eps=eps, weight_decay=decay, amsgrad=amsgrad
            )
        return lambda params: torch.optim.Adam(params, lr=lr, betas=betas, eps=eps, amsgrad=amsgrad)
    if decay:
        _refuse(
            f"{type(optimizer).__name__}(weight_decay={decay}) (decoupled decay; torch's SGD and RMSprop "
            "weight_decay is an L2 term)"
        )
    if isinstance(optimizer, keras.optimizers.SGD):
        momentum, nesterov = config["momentum"], config["nesterov"]
        return lambda params: torch.optim.SGD(params, lr=lr, momentum=momentum, nesterov=nesterov)
    if isinstance(optimizer, keras.optimizers.RMSprop):
        rho, momentum, eps, centered = config["rho"], config["momentum"], config["epsilon"], config["centered"]
        return lambda params: torch.optim.RMSprop(
            params, lr=lr, alpha=rho, eps=eps, momentum=momentum, centered=centered
        )
    _refuse(f"{type(optimizer).__name__} (trainmesh.keras maps Adam, AdamW, SGD and RMSprop)")
    raise AssertionError("unreachable")
