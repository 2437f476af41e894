"""Route a wrapper's forward call to a Module's step hook.

DDP (and DataParallel's replicas) only run ``forward``; DDP prepares its gradient all-reduce
in that call. Passing a ``StepCall`` as the first argument makes the forward run
``training_step`` (or another hook) instead, so the wrapper does its work around the step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn


class StepCall:
    """Marks a call through a wrapper as "run this hook", not the module's forward."""

    __slots__ = ("hook",)

    def __init__(self, hook: str) -> None:
        self.hook = hook


class StepDispatcher(nn.Module):
    """``forward(StepCall(hook), batch, ...)`` runs ``module.<hook>(batch, ...)``.

    With ``chunk_devices`` (ddp2), the batch is split across those devices as DataParallel
    does, and the outputs are gathered.
    """

    def __init__(self, module: nn.Module, chunk_devices: Sequence[torch.device] | None = None) -> None:
        super().__init__()
        self.module = module
        self.chunk_devices = list(chunk_devices) if chunk_devices else None
        self.is_replica = False

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if args and isinstance(args[0], StepCall):
            hook = args[0].hook
            if self.chunk_devices is not None:
                from trainmesh.strategies.data_parallel_ops import run_chunked_step

                return run_chunked_step(self.module, hook, args[1], args[2:], self.chunk_devices)
            if self.is_replica:
                # dp on GPUs: this replica's thread runs one chunk; let self.log know its size.
                from trainmesh.utilities.chunk_context import running_chunk

                with running_chunk(args[1]):
                    return getattr(self.module, hook)(*args[1:], **kwargs)
            return getattr(self.module, hook)(*args[1:], **kwargs)
        if self.chunk_devices is not None:
            # ddp2 in a user's own loop: the node's batch is split across its devices here too.
            from trainmesh.strategies.data_parallel_ops import split_forward

            return split_forward(self.module, args, kwargs, self.chunk_devices)
        return self.module(*args, **kwargs)
