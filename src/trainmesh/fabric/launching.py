"""``Fabric.launch`` and ``Fabric.run``: Fabric's checks and words, the Runtime's launcher underneath.

Under "ddp" ``launch()`` runs the script again once per device (the processes continue after
the call; the process that started them only waits for them), under "ddp_spawn" ``launch(fn)``
spawns ``fn(fabric, *args)`` in each process and returns rank 0's result, as Fabric's launchers.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trainmesh.utilities.lazy import is_instance

if TYPE_CHECKING:
    from trainmesh.runtime import Runtime


def _do_nothing(*_: Any) -> None:
    pass


def _call_run(fabric: Any, *args: Any, **kwargs: Any) -> Any:
    """A subclass's own ``run`` (looked up on the class: the instance's ``run`` launches it)."""
    return type(fabric).run(fabric, *args, **kwargs)


class Launching:
    """The launch half of :class:`trainmesh.fabric.Fabric` (``_runtime`` is the Fabric's Runtime)."""

    _runtime: Runtime

    def __init__(self) -> None:
        self._launched = False
        if type(self).run is not Launching.run:
            # Fabric's: a subclass's run(), called as fabric.run(...), runs in the launched processes
            self.run = functools.partial(_launch_run, self)  # type: ignore[method-assign]  # on this Fabric, as Fabric's

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Override in a subclass with the training code; ``fabric.run(...)`` then launches it."""

    def launch(self, function: Callable[..., Any] = _do_nothing, *args: Any, **kwargs: Any) -> Any:
        """Start the processes (``function``: what each runs, given this Fabric first)."""
        if function is not _do_nothing:
            if not callable(function):
                raise TypeError(
                    f"`Fabric.launch(...)` needs to be a callable, but got {function}."
                    " HINT: do `.launch(your_fn)` instead of `.launch(your_fn())`"
                )
            if not inspect.signature(function).parameters:
                raise TypeError(
                    f"`Fabric.launch(function={function})` needs to take at least one argument. The launcher will "
                    "pass in the `Fabric` object so you can use it inside the function."
                )
        elif is_instance(self._runtime.launcher, "trainmesh.launchers.spawn", "SpawnLauncher"):
            raise TypeError(
                f"To spawn processes with the `{type(self._runtime.strategy).__name__}` strategy, `.launch()` needs to "
                "be called with a function that contains the code to launch in processes."
            )
        return self._wrap_and_launch(function, self, *args, **kwargs)

    def _wrap_and_launch(self, to_run: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        from trainmesh.seed import seed_settings

        self._launched = True
        # Fabric's seed_everything sets PL_GLOBAL_SEED, which spawned processes inherit: one made after
        # Fabric(...) and before launch(fn) seeds their samplers too. The Runtime hands the seed over.
        self._runtime.seed_settings = seed_settings() or self._runtime.seed_settings
        return self._runtime.launch(to_run, *args, **kwargs)

    def _validate_launched(self) -> None:
        runtime = self._runtime
        if not self._launched and len(runtime.device_indices) * runtime.num_nodes > 1:
            raise RuntimeError(
                "To use Fabric with more than one device, you must call `.launch()` or use the CLI: `fabric run --help`."
            )


def _launch_run(fabric: Launching, *args: Any, **kwargs: Any) -> Any:
    return fabric._wrap_and_launch(functools.partial(_call_run, fabric), *args, **kwargs)
