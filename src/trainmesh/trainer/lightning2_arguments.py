"""Lightning 2.6's Trainer arguments that set how a run behaves rather than what it trains:
``benchmark`` (cuDNN's autotuner), ``detect_anomaly``, ``use_distributed_sampler``,
``reload_dataloaders_every_n_epochs``, ``enable_autolog_hparams``; and ``model_registry``, refused.

Each is checked and applied as Lightning's Trainer does (its ``_set_torch_flags``, its data
connector's check); the loops read them from ``LoopContext``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainmesh.utilities.exceptions import MisconfiguredValue
from trainmesh.utilities.rank_zero import rank_zero_info, rank_zero_warn

# The Trainer arguments refused here, with the reason (the inventory of Lightning's API lists them so).
REFUSED_ARGUMENTS = {
    "model_registry": "Lightning's model registry uploads checkpoints to Lightning AI's cloud (the litmodels "
    "package), which trainmesh does not reach; save with ModelCheckpoint or trainer.save_checkpoint and "
    "upload the file with your registry's own client",
}


@dataclass(frozen=True)
class RunBehaviour:
    """The checked values (``benchmark`` as Lightning resolves it: None leaves cuDNN's setting alone)."""

    benchmark: bool | None = None
    detect_anomaly: bool = False
    use_distributed_sampler: bool = True
    reload_dataloaders_every_n_epochs: int = 0
    enable_autolog_hparams: bool = True

    def apply_torch_flags(self) -> None:
        """``torch.backends.cudnn.benchmark`` as Lightning sets it; again in a spawned process,
        which starts with torch's default (Lightning's spawn launcher carries it over too)."""
        if self.benchmark is not None:
            torch.backends.cudnn.benchmark = self.benchmark


def check_run_behaviour(
    *,
    benchmark: bool | None,
    deterministic: bool | str | None,
    detect_anomaly: bool,
    use_distributed_sampler: bool,
    reload_dataloaders_every_n_epochs: int,
    enable_autolog_hparams: bool,
    model_registry: str | None,
) -> RunBehaviour:
    """The arguments checked with Lightning's messages, ``benchmark`` resolved and applied."""
    if model_registry is not None:
        raise ValueError(f"Trainer(model_registry={model_registry!r}): {REFUSED_ARGUMENTS['model_registry']}")
    every = reload_dataloaders_every_n_epochs
    if not isinstance(every, int) or isinstance(every, bool) or every < 0:
        raise MisconfiguredValue(f"`reload_dataloaders_every_n_epochs` should be an int >= 0, got {every}.")
    if deterministic:
        if benchmark is None:
            benchmark = False  # for determinism, as Lightning
        elif benchmark:
            rank_zero_warn(
                "You passed `deterministic=True` and `benchmark=True`. Note that PyTorch ignores"
                " torch.backends.cudnn.deterministic=True when torch.backends.cudnn.benchmark=True.",
            )
    if detect_anomaly:
        rank_zero_info(
            "You have turned on `Trainer(detect_anomaly=True)`. This will significantly slow down compute speed and"
            " is recommended only for model debugging."
        )
    behaviour = RunBehaviour(
        benchmark=benchmark,
        detect_anomaly=bool(detect_anomaly),
        use_distributed_sampler=bool(use_distributed_sampler),
        reload_dataloaders_every_n_epochs=every,
        enable_autolog_hparams=bool(enable_autolog_hparams),
    )
    behaviour.apply_torch_flags()
    return behaviour
