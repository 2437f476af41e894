"""What a strategy supports, stated by the strategy as one typed value.

The loop, the callbacks and the tools read a strategy's ``capabilities`` instead of keeping
tables of strategy names or checking types: a new strategy states its own, and nothing else
changes.

>>> StrategyCapabilities(manual_optimization=True).backward_hooks
True
"""

from __future__ import annotations

import dataclasses

# How a part of the training state is divided among the ranks: kept whole on every rank, split
# over the world, or split over hsdp's shard group.
WHOLE, WORLD, SHARD_GROUP = "1", "n", "s"


@dataclasses.dataclass(frozen=True)
class MemoryModel:
    """How a strategy divides a model's training state among the ranks (``estimate_memory``).

    Args:
        parameters: how each rank holds the parameters: ``WHOLE`` (``"1"``, the default), split over
            the world (``WORLD``, ``"n"``) or over hsdp's shard group (``SHARD_GROUP``, ``"s"``).
        gradients: the same for the gradients (default ``WHOLE``).
        optimizer_state: the same for the optimizer state (default ``WHOLE``).
        gathered_for_backward: the parameters, sharded at the optimizer step, are whole from
            forward to backward (ZeRO-2; default False).
        splits_activations: each rank runs a share of each layer or of the layers (tensor and
            pipeline parallel), so holds that share of them (default False).

    Examples:
        >>> MemoryModel(optimizer_state=WORLD).optimizer_state  # zero1: the optimizer state split
        'n'
    """

    parameters: str = WHOLE
    gradients: str = WHOLE
    optimizer_state: str = WHOLE
    gathered_for_backward: bool = False
    splits_activations: bool = False


REPLICATED = MemoryModel()


@dataclasses.dataclass(frozen=True)
class StrategyCapabilities:
    """What a strategy supports in this run (read once its mesh is built where it depends on it).

    Every field defaults to what a plain one-device run needs least (False, except the three
    that hold unless a strategy says otherwise: ``flop_counting``, ``backward_hooks``,
    ``inference_mode``; ``memory_model`` None).

    Args:
        manual_optimization: a module that steps its own optimizers trains as under plain torch
            (each such strategy has a parity test).
        manual_optimization_refusal: where it does not, why, and what to use instead.
        compile: ``torch.compile`` at the strategy's point in its order of wrapping.
        flop_counting: one rank's ``FlopCounterMode`` count is its share of the step (not where the
            model itself is split: DTensor ops count at global shapes, a pipeline's stages run
            backward with ``autograd.grad``).
        backward_hooks: ``on_before_backward``/``on_after_backward`` have a loss and a backward to
            run around (not where a pipeline schedule runs backward per micro-batch and stage).
        inference_mode: evaluation may run under ``torch.inference_mode()`` (not where parameters
            unsharded under it would become inference tensors training cannot update).
        restore_checkpoint_after_setup: Lightning's strategy property of that name (True for its
            FSDP and ModelParallel): a resumed fit restores the module and the callbacks after
            ``configure_optimizers`` instead of before (trainer/resume.py).
        memory_model: how the training state is divided among ranks (None: no estimate).
        communication_model: a step's collectives follow from ``memory_model`` alone, over one
            process per device (``scaling/projection.py`` projects them to N ranks); not where a
            process splits its batch over its devices (dp, ddp2) or activations travel (tensor,
            pipeline).
        keras_fit: Keras' own ``model.fit`` runs under it (``trainmesh.keras``): every process holds
            the whole model, trains on its share of the data, and its gradients are averaged.
        shards_parameters: FSDP2's ``fully_shard`` swaps the module's parameters for shards,
            gathered whole around forward and backward: code that holds its own weights (Keras
            layers read their own Variables) never sees them trained (keras/arguments.py says so).
        splits_parameters: the module's parameters are DTensors, each rank holding pieces of them
            (FSDP2 shards, tensor-parallel ways): a rank's gradient is not the whole one, so a
            checkpoint does not keep a pending accumulation window (trainer/checkpointing.py).
        lightning1_loops: Lightning 1.x's automatic-optimization loops that 2.x removed (several
            optimizers taking turns with ``optimizer_idx``, truncated backpropagation through time)
            run under it, their weights checked against pytorch-lightning 1.9.5
            (tests/trainer/test_optimizer_idx.py, test_tbptt.py); where not, they are refused
            before training.
        lightning1_optimizer_loop: a 1.x ``OptimizerLoop`` subclass connected with
            ``epoch_loop.batch_loop.connect(optimizer_loop=...)`` runs under it: the strategy has Lightning's
            ``training_step``, which such a loop calls itself (checked against 1.9.5 on one device:
            tests/loops/test_optimizer_loop.py); where not, it is refused before training.
        whole_checkpoints: a Trainer checkpoint holds the whole state though the parameters are
            sharded (FSDP's ``state_dict_type="full"``, Lightning's default): built from
            ``state_dict(sharded=False)``, gathered on rank 0, ``{}`` on the others as in Lightning's
            ``on_save_checkpoint`` there (trainer/checkpointing.py).
        reseeds_each_run: each fit, validate, test and predict starts by seeding every generator
            again with the seed of the latest ``seed_everything`` (nothing without one), as Lightning's
            ``reset_seed()`` in the ``setup_distributed`` of its DDP, FSDP and ModelParallel strategies
            (and pytorch-lightning 1.9.5's ``strategy="dp"`` on CPU, which ran as ddp).

    Examples:
        >>> StrategyCapabilities(manual_optimization=True).backward_hooks
        True
    """

    manual_optimization: bool = False
    manual_optimization_refusal: str = ""
    compile: bool = False
    flop_counting: bool = True
    backward_hooks: bool = True
    inference_mode: bool = True
    restore_checkpoint_after_setup: bool = False
    memory_model: MemoryModel | None = None
    communication_model: bool = False
    keras_fit: bool = False
    shards_parameters: bool = False
    splits_parameters: bool = False
    lightning1_loops: bool = False
    lightning1_optimizer_loop: bool = False
    reseeds_each_run: bool = False
    whole_checkpoints: bool = False

    @property
    def shards_optimizer_state(self) -> bool:
        """Each rank keeps a share of the optimizer state (ZeRO-1 and the sharded strategies), as
        its ``memory_model`` says; Keras' fit splits its own optimizer's state the same way
        (keras/zero.py) where it runs (``keras_fit``)."""
        return self.memory_model is not None and self.memory_model.optimizer_state != WHOLE
