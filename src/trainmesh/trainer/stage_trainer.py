"""What a stage's set-up and end (``stage_setup.py``, ``stage_end.py``) read and write of the Trainer:
its view plus the run's own members. A protocol, so that those modules are typed without importing
``trainer.py`` (which imports them)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from trainmesh.trainer_view import TrainerView

if TYPE_CHECKING:
    from trainmesh.profilers.profiler import Profiler
    from trainmesh.runtime import Runtime
    from trainmesh.trainer.lightning2_arguments import RunBehaviour
    from trainmesh.trainer.loop_state import LoopState
    from trainmesh.trainer.settings import LoopSettings


class StageTrainer(TrainerView, Protocol):
    """The Trainer as a stage's set-up and end see it."""

    _state: LoopState
    _settings: LoopSettings
    _behaviour: RunBehaviour
    _layer_sync: Any  # the batch-norm conversion of sync_batchnorm=True (None without)
    _fault_tolerant: bool
    profiler: Profiler
    barebones: bool
    inference_mode: bool
    overfit_batches: int | float

    @property
    def runtime(self) -> Runtime: ...
    @property
    def callbacks(self) -> list[Any]: ...
    @callbacks.setter
    def callbacks(self, value: list[Any]) -> None: ...
