"""``Trainer(profiler=...)``: the profiler built from the argument, and what it wraps, with
Lightning 2.6's action names: each hook call (``[Callback]<state_key>.<hook>``,
``[LightningModule]<class>.<hook>``), each training epoch and batch (``run_training_epoch``,
``run_training_batch``), each fetch of a batch (``[_TrainingEpochLoop].train_dataloader_next``,
``[_EvaluationLoop].val_next`` / ``test_next``, ``[_PredictionLoop].predict_next``) and each
checkpoint save (``save_checkpoint``). With the default ``PassThroughProfiler`` nothing is wrapped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from trainmesh.callbacks.base import state_key_of
from trainmesh.profilers.profiler import PassThroughProfiler, Profiler
from trainmesh.trainer.hooks import HookDispatcher
from trainmesh.trainer_view import TrainerView
from trainmesh.utilities.exceptions import MisconfiguredValue

_BY_NAME = ("simple", "advanced", "pytorch")

# The fetch of each stage's batches, by Lightning's loop class names.
FETCH_ACTION = {
    "fit": "[_TrainingEpochLoop].train_dataloader_next",
    "sanity_check": "[_EvaluationLoop].val_next",
    "validate": "[_EvaluationLoop].val_next",
    "test": "[_EvaluationLoop].test_next",
    "predict": "[_PredictionLoop].predict_next",
}


def strategy_action(runtime: Any, step: str) -> str:
    """The action of a step the strategy runs: ``[Strategy]<strategy class>.<step>``, as Lightning's
    ``[Strategy]SingleDeviceStrategy.training_step``; PyTorchProfiler steps its schedule at the end of each."""
    return f"[Strategy]{runtime.trainer_port.strategy_class_name}.{step}"


def build_profiler(profiler: Profiler | str | None) -> Profiler:
    """``"simple"``, ``"advanced"``, ``"pytorch"`` (any case), a Profiler, or None (records nothing)."""
    if isinstance(profiler, str):
        from trainmesh import profilers

        name = profiler.lower()
        if name not in _BY_NAME:
            raise MisconfiguredValue(  # Lightning's class (a ValueError too, as before)
                f"Trainer(profiler={profiler!r}): a profiler given by name is one of {list(_BY_NAME)} "
                "(or pass a trainmesh.profilers.Profiler)"
            )
        classes: dict[str, type[Profiler]] = {
            "simple": profilers.SimpleProfiler,
            "advanced": profilers.AdvancedProfiler,
            "pytorch": profilers.PyTorchProfiler,
        }
        return classes[name]()
    if profiler is None:
        return PassThroughProfiler()
    if not isinstance(profiler, Profiler):
        raise TypeError(
            f"Trainer(profiler=...) takes a name ({', '.join(_BY_NAME)}) or a trainmesh.profilers.Profiler, "
            f"got {type(profiler).__name__}"
        )
    return profiler


def records(profiler: Profiler | None) -> bool:
    return profiler is not None and not isinstance(profiler, PassThroughProfiler)


def setup_profiler(profiler: Profiler, stage: str, trainer: TrainerView, module: Any, log_dir: str) -> None:
    """As a stage starts (Lightning's ``__setup_profiler``): the stage, the rank where there are several."""
    setattr(profiler, "_lightning_module", module)  # noqa: B010  # the profiler's own slot (PyTorchProfiler reads it)
    profiler.setup(stage=stage, local_rank=trainer.local_rank if trainer.world_size > 1 else None, log_dir=log_dir)


def hook_dispatcher(trainer: TrainerView, module: Any, callbacks: list[Any], profiler: Profiler) -> HookDispatcher:
    if records(profiler):
        return ProfiledHookDispatcher(trainer, module, callbacks, profiler)
    return HookDispatcher(trainer, module, callbacks)


class ProfiledHookDispatcher(HookDispatcher):
    """A HookDispatcher that records each hook call under Lightning's action name."""

    def __init__(self, trainer: TrainerView, module: Any, callbacks: list[Any], profiler: Profiler) -> None:
        super().__init__(trainer, module, callbacks)
        self._profiler = profiler

    def _callback_call(self, callback: Any, hook: str) -> Callable[..., Any]:
        name = f"[Callback]{state_key_of(callback)}.{hook}"
        method, profiler, trainer, module = self.method(callback, hook), self._profiler, self._trainer, self._module

        def call(*args: Any, **kwargs: Any) -> Any:
            with profiler.profile(name):
                return method(trainer, module, *args, **kwargs)

        return call

    def _module_call(self, hook: str) -> Callable[..., Any]:
        name = f"[LightningModule]{type(self._module).__name__}.{hook}"
        method, profiler = self.module_method(hook), self._profiler

        def call(*args: Any, **kwargs: Any) -> Any:
            with profiler.profile(name):
                return method(*args, **kwargs)

        return call

    def call(self, hook: str, *args: Any) -> Any:
        for callback in self.callbacks_for(hook):
            self._callback_call(callback, hook)(*args)
        return self.call_module(hook, *args)

    def bound(self, hook: str) -> tuple[Callable[..., Any], ...]:
        calls = [self._callback_call(cb, hook) for cb in self.callbacks_for(hook)]
        if self.module_overrides(hook):
            calls.append(self._module_call(hook))
        return tuple(calls)

    def call_callbacks(self, hook: str, *args: Any, monitoring: bool | None = None, **kwargs: Any) -> None:
        for callback in self.callbacks_for(hook, monitoring=monitoring):
            self._callback_call(callback, hook)(*args, **kwargs)

    def call_module(self, hook: str, *args: Any, **kwargs: Any) -> Any:
        if self.module_overrides(hook):
            return self._module_call(hook)(*args, **kwargs)
        return None


def profiled_iter(iterable: Iterable[Any], profiler: Profiler | None, action: str) -> Iterable[Any]:
    """``iterable``, each ``next`` recorded as ``action`` (unchanged where nothing records)."""
    if not records(profiler):
        return iterable
    assert profiler is not None
    return _fetches(iter(iterable), profiler, action)


def _fetches(iterator: Iterator[Any], profiler: Profiler, action: str) -> Iterator[Any]:
    while True:
        profiler.start(action)
        try:
            item = next(iterator)
        except StopIteration:
            return
        finally:
            profiler.stop(action)
        yield item


def profiled_call(function: Callable[..., Any], profiler: Profiler | None, action: str) -> Callable[..., Any]:
    """``function``, each call recorded as ``action`` (itself where nothing records)."""
    if not records(profiler):
        return function
    assert profiler is not None

    def call(*args: Any, **kwargs: Any) -> Any:
        with profiler.profile(action):
            return function(*args, **kwargs)

    return call
