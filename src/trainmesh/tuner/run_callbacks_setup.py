"""The run's callbacks' ``setup``/``teardown`` around a Lightning 1.x ``trainer.tune`` learning-rate search."""

from __future__ import annotations

from typing import Any

from trainmesh.callbacks.base import Callback
from trainmesh.trainer_view import TrainerView


class RunCallbacksSetup(Callback):
    """pytorch-lightning 1.9.5's ``trainer.tune`` runs its learning-rate search inside a ``Trainer._run`` of
    its own: the run's callbacks get ``setup`` before it and ``teardown`` after it (their other hooks not:
    the search's own callback replaced them for its loop). The search's fit here has this callback first
    among its own, handing those two calls to the run's callbacks, in their order."""

    def __init__(self, callbacks: list[Any]) -> None:
        self.callbacks = callbacks

    def setup(self, trainer: TrainerView, pl_module: Any, stage: str) -> None:
        for callback in self.callbacks:
            callback.setup(trainer, pl_module, stage)

    def teardown(self, trainer: TrainerView, pl_module: Any, stage: str) -> None:
        for callback in self.callbacks:
            callback.teardown(trainer, pl_module, stage)
