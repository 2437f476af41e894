"""What a pipeline stage's ``self(...)`` does instead of forward (``Module.__call__`` reads it).

On the last stage, a step hook's ``self(x)`` is answered by the output the pipeline computed
for that micro-batch or batch (``replaying``), checked to be called once, on the input the first
stage received. A stage called outside its schedule, by a user's loop doing ``model(x)``, is
refused: it would return its activations as if they were the model's output.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

# The instance attribute ``Module.__call__`` answers with instead of running forward.
CALL_INSTEAD = "_call_instead"


class ReplayedForward:
    """Stands in for ``self(...)`` inside a step hook: returns what the pipeline computed."""

    def __init__(self, output: Any, expected_input: Any, hook: str, expected_kwargs: dict[str, Any] | None = None) -> None:
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
def replaying(module: nn.Module, output: Any, expected_input: Any, hook: str,
              expected_kwargs: dict[str, Any] | None = None) -> Iterator[ReplayedForward]:
    """While inside, ``module(...)`` returns ``output`` (see ``Module.__call__``)."""
    replay = ReplayedForward(output, expected_input, hook, expected_kwargs)
    previous = module.__dict__.get(CALL_INSTEAD)  # a stage's refusal of direct calls, restored after
    module.__dict__[CALL_INSTEAD] = replay
    try:
        yield replay
    finally:
        if previous is None:
            module.__dict__.pop(CALL_INSTEAD, None)
        else:
            module.__dict__[CALL_INSTEAD] = previous
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
    """From now on ``module(...)`` outside the pipeline's schedule is an error (``Module.__call__``)."""
    module.__dict__[CALL_INSTEAD] = _refuse_call


@contextlib.contextmanager
def inside_schedule(stages: Any) -> Iterator[None]:
    """The schedule calls the stages' modules: lift their refusal meanwhile."""
    lifted = [m for m in stages if m.__dict__.pop(CALL_INSTEAD, None) is not None]
    try:
        yield
    finally:
        for m in lifted:
            refuse_direct_calls(m)
