"""Profilers, as Lightning 2.6's (``lightning.pytorch.profilers``): ``Trainer(profiler="simple" |
"advanced" | "pytorch" | a Profiler)`` records each hook call and loop step it wraps, and writes a
report at the end of each stage.

>>> from trainmesh.profilers import SimpleProfiler
>>> profiler = SimpleProfiler(dirpath=".", filename="perf")  # ./fit-perf.txt after trainer.fit

Each class is imported when first named (cProfile, pstats and torch.profiler take a while to
import): the Trainer imports only the interface.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainmesh.profilers.profiler import PassThroughProfiler, Profiler
from trainmesh.utilities.lazy import lazy_attribute, lazy_dir
from trainmesh.utilities.refusal import refused_class

if TYPE_CHECKING:
    from trainmesh.profilers.advanced import AdvancedProfiler
    from trainmesh.profilers.pytorch import PyTorchProfiler
    from trainmesh.profilers.simple import SimpleProfiler

_LAZY = {
    "AdvancedProfiler": "trainmesh.profilers.advanced",
    "PyTorchProfiler": "trainmesh.profilers.pytorch",
    "SimpleProfiler": "trainmesh.profilers.simple",
}


XLAProfiler = refused_class(
    "XLAProfiler",
    "TPUs and XLA devices (torch_xla) are not supported by trainmesh; use PyTorchProfiler (CPU and CUDA)",
    module=__name__,
)


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, globals(), _LAZY, name, submodules=False)


def __dir__() -> list[str]:
    return lazy_dir(globals(), _LAZY)


__all__ = ["AdvancedProfiler", "PassThroughProfiler", "Profiler", "PyTorchProfiler", "SimpleProfiler", "XLAProfiler"]
