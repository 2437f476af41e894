"""Lightning 1.x's ``*_step_end`` hooks as 1.x's loops call them.

pytorch-lightning 1.9.5 (``optimizer_loop._training_step``, ``evaluation_epoch_loop._evaluation_step_end``)
takes ``strategy_output if model_output is None else model_output``: a ``training_step_end`` (or
``validation_step_end`` / ``test_step_end``) that only updates metrics and logs, returning nothing, leaves the
step's own output in place (the strategies' ``*_step_end`` hand it back unchanged). Taken as the step's
output, that None skipped every batch: nothing trained, silently.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def step_end_hook(module: Any, name: str) -> Callable[[Any], Any]:
    """``module.<name>`` (a ``*_step_end``) whose None means the step's own output, as in 1.x."""
    hook = getattr(module, name)

    def step_end(output: Any) -> Any:
        result = hook(output)
        return output if result is None else result

    return step_end
