"""Lightning's ``StrategyRegistry`` (advanced/strategy_registry.rst), read beside Lightning 2.6's:
the same names in the same order with the same arguments, Lightning's ``register`` / ``get`` /
``remove`` behaviour, and a program's own registered name trained by ``Trainer(strategy=name)``.
Before, ``from lightning.pytorch.strategies import StrategyRegistry`` failed with ImportError."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

pytest.importorskip("lightning.pytorch")


def _ours_and_theirs():
    from lightning.pytorch import strategies as theirs

    from trainmesh import strategies as ours

    return ours.StrategyRegistry, theirs.StrategyRegistry


def test_the_registry_holds_lightning_s_names_and_arguments():
    ours, theirs = _ours_and_theirs()
    assert ours.available_strategies() == theirs.available_strategies()
    assert {k: v["init_params"] for k, v in ours.items()} == {k: v["init_params"] for k, v in theirs.items()}
    ddp = ours.get("ddp_spawn_find_unused_parameters_true")
    assert type(ddp).__name__ == "DDPStrategy"
    with pytest.raises(ValueError, match="DeepSpeed"):
        ours.get("deepspeed_stage_2")


def test_register_get_remove_as_lightning():
    from lightning.pytorch.strategies import SingleDeviceStrategy as Theirs

    from trainmesh.strategies import SingleDeviceStrategy as Ours

    said = {}
    for name, (registry, cls) in {
        "ours": (_ours_and_theirs()[0], Ours),
        "theirs": (_ours_and_theirs()[1], Theirs),
    }.items():
        registry.register("mine_for_test", cls, description="mine", device="cpu")
        try:
            with pytest.raises(ValueError) as clash:
                registry.register("mine_for_test", cls)
            entry = registry["mine_for_test"]
            said[name] = (
                str(clash.value),
                entry["description"],
                entry["init_params"],
                type(registry.get("mine_for_test")).__name__,
            )
        finally:
            registry.remove("mine_for_test")
        with pytest.raises(KeyError) as missing:
            registry.get("mine_for_test")
        said[name] += (str(missing.value).split(".")[0],)
    assert said["ours"] == said["theirs"]


def test_a_registered_name_trains_as_the_strategy_it_names():
    import trainmesh as tm
    from trainmesh.strategies import SingleDeviceStrategy, StrategyRegistry

    class Net(tm.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    g = torch.Generator().manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(16, 4, generator=g), torch.randn(16, 1, generator=g)), batch_size=4)
    weights = {}
    StrategyRegistry.register("single_for_test", SingleDeviceStrategy, device="cpu")
    try:
        for strategy in ("single_for_test", "auto"):
            tm.seed_everything(0)
            model = Net()
            trainer = tm.Trainer(
                max_epochs=1, strategy=strategy, logger=False, enable_checkpointing=False, enable_progress_bar=False
            )
            trainer.fit(model, data)
            weights[strategy] = model.layer.weight.detach().clone()
            assert type(trainer.strategy).__name__ == "SingleDeviceStrategy"
    finally:
        StrategyRegistry.remove("single_for_test")
    assert torch.equal(weights["single_for_test"], weights["auto"])
