"""pytorch-lightning 1.9.5's ``pytorch_lightning.profiler`` (2.0 removed it; ``profilers`` is
today's): the same profiler classes under the old module name, each warning once constructed with
today's name, as 1.9.5's do. They are today's classes (``trainmesh.profilers``), subclassed, so a
1.x program's own profiler built on ``Profiler`` keeps working.

>>> from trainmesh.profiler import SimpleProfiler  # doctest: +SKIP
>>> profiler = SimpleProfiler()  # LightningOneName: today's is trainmesh.profilers.SimpleProfiler  # doctest: +SKIP
"""

from __future__ import annotations

import warnings
from typing import Any

from trainmesh import profilers
from trainmesh.utilities.refusal import LightningOneName

__all__ = ["AdvancedProfiler", "PassThroughProfiler", "Profiler", "PyTorchProfiler", "SimpleProfiler", "XLAProfiler"]


def _warn(name: str) -> None:
    warnings.warn(
        f"trainmesh.profiler.{name} is pytorch-lightning 1.x's name (1.9 deprecated it, 2.0 removed it); "
        f"today: trainmesh.profilers.{name}",
        LightningOneName,
        stacklevel=3,
    )


class AdvancedProfiler(profilers.AdvancedProfiler):
    """1.x's name of :class:`trainmesh.profilers.AdvancedProfiler`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _warn("AdvancedProfiler")
        super().__init__(*args, **kwargs)


class PassThroughProfiler(profilers.PassThroughProfiler):
    """1.x's name of :class:`trainmesh.profilers.PassThroughProfiler`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _warn("PassThroughProfiler")
        super().__init__(*args, **kwargs)


class Profiler(profilers.Profiler):
    """1.x's name of :class:`trainmesh.profilers.Profiler`, the base of a profiler of one's own."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _warn("Profiler")
        super().__init__(*args, **kwargs)


class PyTorchProfiler(profilers.PyTorchProfiler):
    """1.x's name of :class:`trainmesh.profilers.PyTorchProfiler`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _warn("PyTorchProfiler")
        super().__init__(*args, **kwargs)


class SimpleProfiler(profilers.SimpleProfiler):
    """1.x's name of :class:`trainmesh.profilers.SimpleProfiler`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _warn("SimpleProfiler")
        super().__init__(*args, **kwargs)


XLAProfiler = profilers.XLAProfiler
