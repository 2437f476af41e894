"""What the step probe (step_probe.py) restores before each of its runs of the step and after: the fit goes on as
Keras' own would."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def global_seed_state() -> Any:
    from keras.src.backend.common import global_state

    generator = global_state.get_global_attribute("global_seed_generator")
    return generator, None if generator is None else generator.state.value.detach().clone()


def _set_global_seed_state(saved: Any) -> None:
    from keras.src.backend.common import global_state

    generator, value = saved
    global_state.set_global_attribute("global_seed_generator", generator)
    if generator is not None:
        generator.state.assign(value)


class Restorer:
    """Every variable of the model, its optimizer's, the gradients left in them, Keras' global seed
    generator and torch's, numpy's and Python's generators: saved, and restored before each run and after."""

    def __init__(self, model: Any) -> None:
        self.model = model
        optimizer = getattr(model, "optimizer", None)
        variables = list(model.variables) + list(getattr(model, "metrics_variables", []))
        if optimizer is not None and optimizer.built:
            variables += list(optimizer.variables)
        self.variables = list({id(v): v for v in variables}.values())
        self.values = [v.value.detach().clone() for v in self.variables]
        self.grads = [(v, v.value.grad) for v in model.trainable_variables]
        self.seed = global_seed_state()
        self.generators = (torch.get_rng_state(), np.random.get_state(), random.getstate())

    def restore(self) -> None:
        for variable, value in zip(self.variables, self.values, strict=True):
            variable.assign(value)
        for variable, grad in self.grads:
            variable.value.grad = grad
        _set_global_seed_state(self.seed)
        torch.set_rng_state(self.generators[0])
        np.random.set_state(self.generators[1])
        random.setstate(self.generators[2])
        saved = {id(v) for v in self.variables}
        for metric in getattr(self.model, "metrics", None) or []:  # built by the probe's first step: fresh
            if any(id(v) not in saved for v in metric.variables):
                metric.reset_state()
