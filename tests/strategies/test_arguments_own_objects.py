"""The program's own objects are the ones the Trainer runs, as in Lightning 2.6: ``Trainer(strategy=s)``
gives ``trainer.strategy is s`` (the Trainer sets ``s``'s device, module and plugins, which the program
reads through its reference), ``accelerator=acc`` gives ``trainer.accelerator is acc``, and a
``TorchCheckpointIO`` in ``plugins`` is ``trainer.strategy.checkpoint_io``. Each check is run on
Lightning 2.6.6 too, so the test says what the owner does."""

from __future__ import annotations

import pytest


def _frameworks():
    import lightning.pytorch as lightning
    from lightning.pytorch.accelerators import CPUAccelerator as LightningCPU
    from lightning.pytorch.demos.boring_classes import BoringModel as LightningBoring
    from lightning.pytorch.plugins import TorchCheckpointIO as LightningIO
    from lightning.pytorch.strategies import DDPStrategy as LightningDDP
    from lightning.pytorch.strategies import SingleDeviceStrategy as LightningSingle

    import trainmesh
    from trainmesh.accelerator_types import CPUAccelerator
    from trainmesh.demos.boring_classes import BoringModel
    from trainmesh.plugins import TorchCheckpointIO
    from trainmesh.strategies import DDPStrategy, SingleDeviceStrategy

    return {
        "lightning": (lightning.Trainer, LightningSingle, LightningDDP, LightningCPU, LightningIO, LightningBoring),
        "trainmesh": (
            trainmesh.Trainer,
            SingleDeviceStrategy,
            DDPStrategy,
            CPUAccelerator,
            TorchCheckpointIO,
            BoringModel,
        ),
    }


QUIET = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False, "enable_checkpointing": False}


@pytest.mark.parametrize("framework", ["lightning", "trainmesh"])
def test_the_programs_strategy_accelerator_and_checkpoint_io_are_the_runs(framework, tmp_path):
    Trainer, Single, DDP, CPU, IO, Boring = _frameworks()[framework]
    strategy, accelerator, checkpoint_io = Single(device="cpu"), CPU(), IO()
    trainer = Trainer(
        strategy=strategy,
        accelerator=accelerator,
        plugins=[checkpoint_io],
        max_steps=1,
        default_root_dir=tmp_path,
        **QUIET,
    )
    assert trainer.strategy is strategy
    assert trainer.accelerator is accelerator and trainer.accelerator is trainer.accelerator
    assert strategy.checkpoint_io is checkpoint_io
    model = Boring()
    trainer.fit(model)
    # what the Trainer set on the strategy, read through the program's own reference
    assert (strategy.root_device.type, strategy.global_rank, strategy.world_size) == ("cpu", 0, 1)
    assert strategy.lightning_module is model and strategy.model is model
    assert strategy.precision_plugin is trainer.precision_plugin and strategy.precision_plugin is not None
    ddp = DDP()
    assert Trainer(strategy=ddp, devices=1, accelerator="cpu", **QUIET).strategy is ddp
