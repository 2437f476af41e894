"""Gradients averaged when a training step's backward pass ends: the gradients a step of the user's reads.

A ``train_step`` of the user's reads the gradients ``loss.backward()`` leaves (``v.value.grad``) before
it hands them to Keras' optimizer: to clip them by their global norm by hand, or to log that norm.
Averaged only in the optimizer's ``apply`` (sync.averaged_apply), those reads saw this process's own
gradient, so a clip by hand scaled each process's part by another factor than one process's clip of the
global batch's gradient (weights 1.7e-2 apart at 2 processes, silently), and a logged norm was this
process's. So within each training step, once a backward pass has accumulated the gradients of the
model's trainable variables, they are averaged in place, weighted as ``apply`` weighs them (torch's
autograd engine runs a callback at the end of the pass, as torch DDP's reducer and FSDP do), and the
``apply`` that follows does not average them again. The average is linear: a second backward pass
before the ``apply`` (gradients accumulated) averages what it added, and a GAN's two passes each
average theirs. Gradients computed otherwise (``torch.autograd.grad``) are still averaged in ``apply``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch.autograd import Variable


class BackwardAverage:
    """Hooks on the model's trainable variables (registered at the first training step, when the model
    is built, and removed when the call ends); ``average(gradients, batch)`` averages a list in place."""

    def __init__(self, average: Callable[[list[Any], int], list[Any]], batch: Callable[[], int | None]) -> None:
        self._average, self._batch = average, batch
        self._variables: list[Any] = []
        self._handles: list[Any] = []
        self._touched: list[int] = []  # this backward pass: the variables whose gradient it accumulated
        self.averaged: set[int] = set()  # ids of the variables averaged since the step began

    def step_begins(self, model: Any) -> None:
        """A training step begins: every trainable variable of ``model`` hooked (at the first step, once
        the model is built: the same variables for the whole call), none averaged yet."""
        self.averaged.clear()
        if self._handles:
            return
        self._variables = list(model.trainable_variables)
        for index, variable in enumerate(self._variables):
            hook = functools.partial(self._accumulated, index)
            self._handles.append(variable.value.register_post_accumulate_grad_hook(hook))

    def covers(self, variables: Any) -> bool:
        """Whether every variable of ``variables`` had its gradient averaged by a backward pass of this step."""
        return bool(self.averaged) and all(id(variable) in self.averaged for variable in variables)

    def remove(self) -> None:
        """The hooks removed (the call is over)."""
        for handle in self._handles:
            handle.remove()
        self._handles, self._variables = [], []

    def _accumulated(self, index: int, _parameter: Any) -> None:
        if self._batch() is None:  # a backward pass outside a training step: nothing of fit's
            return
        if not self._touched:  # the pass's first gradient: average them all once the pass is over
            Variable._execution_engine.queue_callback(self._pass_ends)
        self._touched.append(index)

    def _pass_ends(self) -> None:
        touched, self._touched = sorted(set(self._touched)), []
        batch = self._batch()
        if batch is None:
            return
        variables = [self._variables[index] for index in touched]
        gradients = [variable.value.grad for variable in variables]
        with torch.no_grad():
            for gradient, averaged in zip(gradients, self._average(gradients, batch), strict=True):
                if gradient is not None and averaged is not gradient:
                    gradient.copy_(averaged)
        self.averaged.update(id(variable) for variable in variables)
