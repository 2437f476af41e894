"""What the Trainer keeps of its Lightning 1.x arguments (``trainer._lightning1``): read by its 1.x
members (trainer_members.py) and ``trainer.tune`` (tune.py)."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass
class LightningOneRun:
    """What the Trainer keeps of its 1.x arguments: the fit's checkpoint, the tuner's switches, the
    loader mode, whether metrics move to the CPU."""

    resume_from_checkpoint: str | os.PathLike[str] | None = None
    auto_lr_find: bool | str = False
    auto_scale_batch_size: bool | str = False
    multiple_trainloader_mode: str = "max_size_cycle"
    move_metrics_to_cpu: bool = False
    track_grad_norm: int | float | str = -1
    tuning: bool = False
    resuming: bool = False  # a fit was given resume_from_checkpoint's path
    # The Trainer was built with a spelling only 1.x has (an argument 2.0 removed, from_argparse_args):
    # the run follows pytorch-lightning 1.9.5 whatever its module's hooks (trainer_members.written_for_lightning1)
    spelled: bool = False
