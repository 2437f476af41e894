"""What a pipeline stage's ``self(...)`` does instead of forward.

On the last stage, a step hook's ``self(x)`` is answered by the output the pipeline computed
for that micro-batch or batch (``replaying``), checked to be called once, on the input the first
stage received. A stage called outside its schedule, by a user's loop doing ``model(x)``, is
refused: it would return its activations as if they were the model's output.

Only a pipeline's module pays for this: its class is swapped for a subclass that adds
``StageCalls.__call__`` (as FSDP2's ``fully_shard`` swaps a module's class), so every other
model's forward runs torch's ``nn.Module.__call__`` untouched.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn


class StageCalls:
    """Mixed in before a pipeline module's own class: ``self(...)`` answers with ``call_instead``
    while one is set (a replay, or a refusal), else runs forward as usual."""

    call_instead: Callable[..., Any] | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        instead = self.call_instead
        if instead is not None:
            return instead(*args, **kwargs)
        return super().__call__(*args, **kwargs)  # type: ignore[misc]


_STAGE_CLASSES: dict[type, type] = {}


def as_stage(module: nn.Module) -> StageCalls:
    """``module``, its class swapped (once) for one with ``StageCalls`` mixed in; same name."""
    if not isinstance(module, StageCalls):
        cls = type(module)
        stage_class = _STAGE_CLASSES.get(cls)
        if stage_class is None:
            stage_class = type(
                cls.__name__, (StageCalls, cls), {"__module__": cls.__module__, "__qualname__": cls.__qualname__}
            )
            _STAGE_CLASSES[cls] = stage_class
        module.__class__ = stage_class
    assert isinstance(module, StageCalls)
    return module


class ReplayedForward:
    """Stands in for ``self(...)`` inside a step hook: returns what the pipeline computed."""

    def __init__(
        self, output: Any, expected_input: Any, hook: str, expected_kwargs: dict[str, Any] | None = None
    ) -> None:
        self.output, self.expected_input, self.hook, self.calls = output, expected_input, hook, 0
        self.expected_kwargs = expected_kwargs or {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls > 1:
            raise RuntimeError(
                f"{self.hook} called self(...) twice; under pipeline parallelism the model's forward runs once per "
                "batch, across the stages. Call it once, on pipeline_input(batch)"
            )
        given = args[0] if len(args) == 1 else args  # self(x), or self(x, mask) for a tuple input
        if not _same(given, self.expected_input):
            raise ValueError(
                f"{self.hook} called self(...) on something other than pipeline_input(batch), which is what the first "
                "pipeline stage received. Do the transformation inside forward, or override pipeline_input(batch) "
                "to return the model's input"
            )
        if not _same(kwargs, self.expected_kwargs):
            raise ValueError(
                f"{self.hook} called self(...) with keyword inputs {sorted(kwargs)} other than pipeline_kwargs(batch) "
                f"({sorted(self.expected_kwargs)}), which are what every pipeline stage received. Return the model's "
                "keyword inputs from pipeline_kwargs(batch) and pass exactly those"
            )
        return self.output


def _same(given: Any, expected: Any) -> bool:
    if given is expected:
        return True
    if isinstance(given, torch.Tensor) and isinstance(expected, torch.Tensor):
        return given.shape == expected.shape and given.dtype == expected.dtype and bool(torch.equal(given, expected))
    if isinstance(given, (tuple, list)) and isinstance(expected, (tuple, list)):
        return len(given) == len(expected) and all(_same(a, b) for a, b in zip(given, expected))
    if isinstance(given, dict) and isinstance(expected, dict):
        return given.keys() == expected.keys() and all(_same(given[k], expected[k]) for k in given)
    return False


@contextlib.contextmanager
def replaying(
    module: nn.Module, output: Any, expected_input: Any, hook: str, expected_kwargs: dict[str, Any] | None = None
) -> Iterator[ReplayedForward]:
    """While inside, ``module(...)`` returns ``output``."""
    replay = ReplayedForward(output, expected_input, hook, expected_kwargs)
    stage = as_stage(module)
    previous = stage.call_instead  # a stage's refusal of direct calls, restored after
    stage.call_instead = replay
    try:
        yield replay
    finally:
        stage.call_instead = previous
    if replay.calls == 0:
        raise RuntimeError(
            f"{hook} never called self(...): under pipeline parallelism its result must come from the model's "
            "forward, which the pipeline runs; call self(pipeline_input(batch)) once"
        )


OUTSIDE_PIPELINE = (
    "this module is one stage of a pipeline (ModelParallelStrategy(pp=...)): called directly, it would return "
    "its stage's activations as if they were the model's output. Run steps through the Trainer, or "
    "runtime.train_step / runtime.eval_step in your own loop"
)


def _refuse_call(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError(OUTSIDE_PIPELINE)


def refuse_direct_calls(module: nn.Module) -> None:
    """From now on ``module(...)`` outside the pipeline's schedule is an error."""
    as_stage(module).call_instead = _refuse_call


@contextlib.contextmanager
def inside_schedule(stages: Any) -> Iterator[None]:
    """The schedule calls the stages' modules: lift their refusal meanwhile."""
    lifted = [m for m in stages if isinstance(m, StageCalls) and m.call_instead is not None]
    for m in lifted:
        m.call_instead = None
    try:
        yield
    finally:
        for m in lifted:
            m.call_instead = _refuse_call  # refuse_direct_calls, on a module that is a stage already
