"""DataParallel (``strategy="dp"``): one process; every batch is split across the devices.

On several GPUs each step replicates the module onto every device (torch's ``replicate`` /
``parallel_apply``), with DataParallel's semantics: state a step changes on a replica is lost.
On CPU, ``devices=k`` runs the k chunks one after another in this process with the same
arithmetic; it is not faster, but dp code can be written and tested on a laptop.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from trainmesh.accelerators import device_for
from trainmesh.strategies.capabilities import REPLICATED, StrategyCapabilities
from trainmesh.strategies.compile import refuse_compile
from trainmesh.strategies.data_parallel import SplitForward, manual_refusal_on_replicas, mean_loss, run_chunked_step
from trainmesh.strategies.lockstep import Lockstep
from trainmesh.strategies.mesh import ParallelDims, ParallelMesh
from trainmesh.strategies.protocol import Placement
from trainmesh.strategies.single import SingleDeviceStrategy
from trainmesh.strategies.step import StepHooks, StepResult, run_eval_step, run_train_step


class DataParallelStrategy(SingleDeviceStrategy):
    """The seeds' ``dp`` mode; ``training_step_end`` sees the outputs of all devices.

    Everything but the step is one device's (the first): placement, checkpoints, the trivial
    collectives of one process. So this is the one-device strategy with the step split.

    Args:
        placement: the devices and precision (set by the Trainer/Runtime; leave it None).

    Examples:
        >>> strategy = DataParallelStrategy(placement=Placement("cpu", (0, 1)))
        >>> [d.index for d in strategy.chunk_devices]
        [0, 1]
    """

    name = "dp"

    def __init__(self, *, placement: Placement | None = None) -> None:
        self.placement = placement or Placement()
        if self.placement.num_nodes != 1:
            raise ValueError(
                f"strategy='dp' runs in one process on one machine, but num_nodes={self.placement.num_nodes}; use "
                "'ddp2' (dp within a node, DDP across nodes) or 'ddp'"
            )
        refuse_compile(self.placement.compile, "dp", instead="DataParallel replicates the module every step")
        self.precision = self.placement.precision
        self.chunk_devices = [device_for(self.placement.device_type, index) for index in self.placement.devices]
        self._device = self.chunk_devices[0]
        self._mesh = ParallelMesh(ParallelDims().resolved(1))
        # Manual optimization is checked against plain torch where the chunks run in turn on the
        # module itself (tests/trainer/test_manual_optimization_split.py), not on replicas.
        refusal = manual_refusal_on_replicas(self.chunk_devices, "dp")
        self.capabilities = StrategyCapabilities(
            manual_optimization=not refusal,
            manual_optimization_refusal=refusal,
            memory_model=REPLICATED,
            # Lightning 2.x has no dp; pytorch-lightning 1.9.5 ran strategy="dp" on CPU as ddp on one
            # process, which seeds again as each run starts (tests/trainer/test_reseed.py).
            reseeds_each_run=self.placement.device_type == "cpu",
        )

    def setup_module(self, module: nn.Module) -> nn.Module:
        # Calling the placed model splits the batch, so a user's own loop gets dp too.
        return SplitForward(super().setup_module(module), self.chunk_devices)

    def train_step(
        self, module: nn.Module, batch: Any, batch_idx: int, *, sync_grads: bool, hooks: StepHooks
    ) -> StepResult:
        inner = _inner(module)
        if hooks.backward_scope is not None:  # manual optimization: the chunks in lockstep
            lockstep = Lockstep(inner, context=self.precision.autocast)
            chunks = len(self.chunk_devices)
            with hooks.backward_scope(lockstep):
                return run_train_step(
                    lambda: lockstep.run("training_step", batch, (batch_idx,), chunks, hooks.chunk_scope, hooks.call),
                    combine=mean_loss,
                    hooks=hooks,
                    autocast=self.precision.autocast(),
                    no_sync=None,
                )
        return run_train_step(
            lambda: run_chunked_step(
                inner, "training_step", batch, (batch_idx,), self.chunk_devices, hooks.chunk_scope, call=hooks.call
            ),
            combine=mean_loss,
            hooks=hooks,
            autocast=self.precision.autocast(),
            no_sync=None,
        )

    def eval_step(self, module: nn.Module, hook: str, batch: Any, batch_idx: int, *extra: Any, hooks: StepHooks) -> Any:
        inner = _inner(module)
        return run_eval_step(
            lambda: run_chunked_step(
                inner, hook, batch, (batch_idx, *extra), self.chunk_devices, hooks.chunk_scope, call=hooks.call
            ),
            hooks=hooks,
            autocast=self.precision.autocast(),
        )


def _inner(module: nn.Module) -> nn.Module:
    return module.module if isinstance(module, SplitForward) else module
