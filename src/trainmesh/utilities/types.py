"""Lightning's ``utilities.types``: the names programs use to annotate their hooks.

``configure_optimizers`` may return any of the shapes named here; the Trainer reads them all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypedDict, runtime_checkable

from torch import Tensor
from torch.nn.parallel import DistributedDataParallel
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

__all__ = [
    "EVAL_DATALOADERS",
    "STEP_OUTPUT",
    "TRAIN_DATALOADERS",
    "DistributedDataParallel",
    "LRSchedulerConfig",
    "LRSchedulerConfigType",
    "LRSchedulerPLType",
    "LRSchedulerTypeUnion",
    "Optimizable",
    "OptimizerConfig",
    "OptimizerLRScheduler",
    "OptimizerLRSchedulerConfig",
    "PredictStep",
    "Steppable",
    "TestStep",
    "TrainingStep",
    "ValidationStep",
]

STEP_OUTPUT = Tensor | Mapping[str, Any] | None
TRAIN_DATALOADERS = Any
EVAL_DATALOADERS = Any
LRSchedulerTypeUnion = LRScheduler | ReduceLROnPlateau
LRSchedulerPLType = LRSchedulerTypeUnion


@dataclass
class LRSchedulerConfig:
    """One scheduler and when it steps, as ``configure_optimizers`` describes it in a dict."""

    scheduler: LRSchedulerTypeUnion
    name: str | None = None
    interval: str = "epoch"
    frequency: int = 1
    reduce_on_plateau: bool = False
    monitor: str | None = None
    strict: bool = True


class LRSchedulerConfigType(TypedDict, total=False):
    scheduler: LRSchedulerTypeUnion
    name: str | None
    interval: str
    frequency: int
    reduce_on_plateau: bool
    monitor: str | None
    strict: bool


class OptimizerConfig(TypedDict):
    optimizer: Optimizer


class OptimizerLRSchedulerConfig(TypedDict, total=False):
    optimizer: Optimizer
    lr_scheduler: LRSchedulerTypeUnion | LRSchedulerConfigType
    monitor: str


OptimizerLRScheduler = (
    Optimizer
    | Sequence[Optimizer]
    | tuple[Sequence[Optimizer], Sequence[LRSchedulerTypeUnion | LRSchedulerConfig]]
    | OptimizerConfig
    | OptimizerLRSchedulerConfig
    | Sequence[OptimizerConfig]
    | Sequence[OptimizerLRSchedulerConfig]
    | None
)


# pytorch-lightning 1.9.5's step protocols, which 2.0 removed: ``isinstance(model, TrainingStep)``
# tells whether an object defines the step.
@runtime_checkable
class TrainingStep(Protocol):
    """An object with a ``training_step`` (``isinstance`` checks it)."""

    def training_step(self, *args: Any, **kwargs: Any) -> STEP_OUTPUT: ...


@runtime_checkable
class ValidationStep(Protocol):
    """An object with a ``validation_step`` (``isinstance`` checks it)."""

    def validation_step(self, *args: Any, **kwargs: Any) -> STEP_OUTPUT | None: ...


@runtime_checkable
class TestStep(Protocol):
    """An object with a ``test_step`` (``isinstance`` checks it)."""

    def test_step(self, *args: Any, **kwargs: Any) -> STEP_OUTPUT | None: ...


@runtime_checkable
class PredictStep(Protocol):
    """An object with a ``predict_step`` (``isinstance`` checks it)."""

    def predict_step(self, *args: Any, **kwargs: Any) -> STEP_OUTPUT: ...


# Lightning Fabric's ``utilities.types`` names (``lightning.fabric.utilities.types`` is this module under trainmesh.fabric)
@runtime_checkable
class Steppable(Protocol):
    """Anything with a ``step`` (Fabric's)."""

    def step(self, closure: Any = None) -> Any: ...


@runtime_checkable
class Optimizable(Steppable, Protocol):
    """An optimizer, as Fabric's protocol reads one: ``step``, its groups, defaults, state and state dicts."""

    param_groups: list[dict[Any, Any]]
    defaults: dict[Any, Any]
    state: Any

    def state_dict(self) -> dict[str, dict[Any, Any]]: ...

    def load_state_dict(self, state_dict: dict[str, dict[Any, Any]]) -> None: ...
