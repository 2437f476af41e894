"""The PyTorchProfiler's schedule and module records, as Lightning 2.6's (``profilers/pytorch.py``):
``ScheduleWrapper`` counts training, validation, test and predict steps apart, so one
``torch.profiler.schedule`` applies to each; ``RegisterRecordFunction`` names every submodule's
forward in the trace."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from torch import Tensor, nn
from torch.autograd.profiler import record_function
from torch.profiler import ProfilerAction
from torch.utils.hooks import RemovableHandle


class RegisterRecordFunction:
    """While entered, each submodule's forward is a ``[pl][module]<class>: <name>`` record."""

    def __init__(self, model: nn.Module) -> None:
        self._model = model
        self._records: dict[str, record_function] = {}
        self._handles: dict[str, list[RemovableHandle]] = {}

    def _start_recording_forward(self, _: nn.Module, input: Tensor, record_name: str) -> Tensor:
        record = record_function("[pl][module]" + record_name)  # the name Lightning's traces use
        record.__enter__()
        self._records[record_name] = record
        return input

    def _stop_recording_forward(self, _: nn.Module, __: Tensor, output: Tensor, record_name: str) -> Tensor:
        self._records[record_name].__exit__(None, None, None)
        return output

    def __enter__(self) -> None:
        for module_name, module in self._model.named_modules():
            if module_name:
                record_name = f"{type(module).__module__}.{type(module).__name__}: {module_name}"
                self._handles[module_name] = [
                    module.register_forward_pre_hook(partial(self._start_recording_forward, record_name=record_name)),
                    module.register_forward_hook(partial(self._stop_recording_forward, record_name=record_name)),
                ]

    def __exit__(self, type: Any, value: Any, traceback: Any) -> None:
        for handles in self._handles.values():
            for h in handles:
                h.remove()
        self._handles = {}


class ScheduleWrapper:
    """A ``torch.profiler.schedule`` applied to the training, validation, test and predict steps
    apart (each its own step count)."""

    def __init__(self, schedule: Callable[[int], ProfilerAction]) -> None:
        self._schedule = schedule
        self.reset()

    def reset(self) -> None:
        self._num_steps = {"training": 0, "validation": 0, "test": 0, "predict": 0}
        self._reached_end = {"training": False, "validation": False, "test": False, "predict": False}
        self._current_action: str | None = None
        self._prev_schedule_action: ProfilerAction | None = None
        self._start_action_name: str | None = None

    def setup(self, start_action_name: str) -> None:
        self._start_action_name = start_action_name

    def pre_step(self, current_action: str) -> None:
        self._current_action = current_action

    @property
    def kind(self) -> str | None:
        assert self._current_action is not None
        return next((k for k in self._num_steps if self._current_action.endswith(f"{k}_step")), None)

    @property
    def is_training(self) -> bool:
        return self.kind == "training"

    @property
    def is_validating(self) -> bool:
        return self.kind == "validation"

    @property
    def is_testing(self) -> bool:
        return self.kind == "test"

    @property
    def is_predicting(self) -> bool:
        return self.kind == "predict"

    @property
    def num_step(self) -> int:
        kind = self.kind
        return 0 if kind is None else self._num_steps[kind]

    def _step(self) -> None:
        kind = self.kind
        if kind == "validation":
            assert self._start_action_name is not None
            # In fit, the sanity check's steps do not count (Lightning's rule).
            if self._start_action_name.endswith("on_fit_start") and self._num_steps["training"] == 0:
                return
        if kind is not None:
            self._num_steps[kind] += 1

    @property
    def has_finished(self) -> bool:
        kind = self.kind
        return kind is not None and self._reached_end[kind]

    def __call__(self, num_step: int) -> ProfilerAction:
        # The step count passed in is torch's; the counts kept here are per kind of step.
        if self._current_action is None or self.has_finished:
            return ProfilerAction.NONE
        self._step()
        action = self._schedule(max(self.num_step, 0))
        if self._prev_schedule_action == ProfilerAction.RECORD and action == ProfilerAction.WARMUP:
            # validation started recording before training: torch refuses going back to warm-up
            action = ProfilerAction.RECORD
        if action == ProfilerAction.RECORD_AND_SAVE and self.kind is not None:
            self._reached_end[self.kind] = True
        self._prev_schedule_action = action
        return action
