"""What a loop function takes: the loop's state and the parts it calls, as one typed value.

The Trainer builds one per fit/validate/test/predict call (``stage_setup.prepare_stage``); the loop
functions (fit_loop.py, evaluation.py) take it instead of the Trainer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainmesh.trainer.loop_state import LoopState

if TYPE_CHECKING:
    from trainmesh.profilers.profiler import Profiler
    from trainmesh.runtime import Runtime
    from trainmesh.trainer.hooks import HookDispatcher
    from trainmesh.trainer.publishing import Publisher
    from trainmesh.trainer.settings import LoopSettings
    from trainmesh.trainer_view import TrainerView
    from trainmesh.utilities.device_loader import BatchHooks


@dataclass(frozen=True)
class LoopContext:
    """What the loop functions take: the state they update and the parts they call."""

    state: LoopState
    settings: LoopSettings
    runtime: Runtime
    hooks: HookDispatcher
    publisher: Publisher  # the loggers, and metrics into the state
    view: TrainerView  # what callbacks receive (and a preemption save goes through)
    inference_mode: bool = True
    batch_hooks: BatchHooks | None = None  # the batch-transfer hooks; None: nobody overrides them
    # A resumed fit whose module and callbacks were restored before configure_optimizers (trainer/resume.py)
    modules_restored: bool = False
    profiler: Profiler | None = (
        None  # Trainer(profiler=...): what the loops' steps are recorded with (trainer/profiling.py)
    )
    # Lightning 2's Trainer arguments the loops read (trainer/lightning2_arguments.py)
    use_distributed_sampler: bool = True
    # Lightning's distributed sampler shuffles every training loader, none under overfit_batches
    shuffle_training: bool = True
    # A pytorch-lightning 1.x module's loaders are split as 1.9.5 splits them (strategies/sampling.py)
    wrap_samplers: bool = False
    # The run follows pytorch-lightning 1.9.5: its module's hooks or its Trainer's 1.x spelling (trainer_members.py)
    lightning1: bool = False
    reload_every_n_epochs: int = 0
    detect_anomaly: bool = False
    log_hyperparams: bool = True
