"""Whether a module, or any module inside it, runs compiled: the one place that reads torch's mark.

``nn.Module.compile()`` (and strategies/compile.py, which compiles in place the same way) sets
``_compiled_call_impl`` on the module it compiles; a callback asks here instead of reading a
private torch attribute itself (a dispatch mode around a compiled call would be traced into its graph).

>>> import torch
>>> has_compiled_part(torch.nn.Linear(2, 2))
False
"""

from __future__ import annotations

from typing import Any

from torch import nn


def has_compiled_part(model: Any) -> bool:
    """``model`` is a module of which some part (itself included) was compiled in place."""
    return isinstance(model, nn.Module) and any(
        getattr(m, "_compiled_call_impl", None) is not None for m in model.modules()
    )
