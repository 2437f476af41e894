"""Whether a module, or any module inside it, runs compiled: the one place that reads torch's mark.

``nn.Module.compile()`` (and strategies/compile.py, which compiles in place the same way) sets
``_compiled_call_impl`` on the module it compiles; ``torch.compile(module)`` returns a wrapper,
dynamo's ``OptimizedModule``, which a program keeps as a submodule (``self.student =
torch.compile(self.student)`` in ``configure_model``). A callback asks here instead of reading
torch's private names itself (a dispatch mode around a compiled call would be traced into its graph).

>>> import torch
>>> has_compiled_part(torch.nn.Linear(2, 2))
False
"""

from __future__ import annotations

import sys
from typing import Any

from torch import nn


def has_compiled_part(model: Any) -> bool:
    """``model`` is a module of which some part (itself included) was compiled, in place or wrapped
    by ``torch.compile``."""
    # dynamo's wrapper class, once torch.compile has been imported (no OptimizedModule exists before)
    wrapper = getattr(sys.modules.get("torch._dynamo.eval_frame"), "OptimizedModule", None)
    return isinstance(model, nn.Module) and any(
        getattr(m, "_compiled_call_impl", None) is not None or (wrapper is not None and isinstance(m, wrapper))
        for m in model.modules()
    )
