"""``Trainer(overfit_batches=...)`` (trainer/overfit.py) against Lightning 2.6's: the same program,
its train and validation loaders shuffling, fit under each with the same seed: the same number of
steps, bit-identical weights, the same validation loss, and Lightning's warning that shuffling was
turned off; validate/test outside fit keep their loaders and limits."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm

pl = pytest.importorskip("lightning.pytorch")


def run(framework, root, overfit_batches):
    base, trainer_class, seed = framework

    class Net(base):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 2)

        def training_step(self, batch, batch_idx):
            return F.cross_entropy(self.layer(batch[0]), batch[1])

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", F.cross_entropy(self.layer(batch[0]), batch[1]))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    seed(5)
    model = Net()
    g = torch.Generator().manual_seed(0)
    dataset = TensorDataset(torch.randn(16, 4, generator=g), torch.randint(0, 2, (16,), generator=g))
    trainer = trainer_class(
        max_epochs=3,
        overfit_batches=overfit_batches,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        default_root_dir=root,
    )
    with pytest.warns(UserWarning, match="overfit but enabled train dataloader shuffling"):
        trainer.fit(model, DataLoader(dataset, 2, shuffle=True), DataLoader(dataset, 2, shuffle=True))
    val_loss = float(trainer.callback_metrics["val_loss"])
    return trainer.global_step, val_loss, model.state_dict()


@pytest.mark.parametrize("overfit_batches", [2, 0.25])
def test_overfit_is_lightnings(tmp_path, overfit_batches):
    theirs = run((pl.LightningModule, pl.Trainer, pl.seed_everything), str(tmp_path / "pl"), overfit_batches)
    ours = run((tm.LightningModule, tm.Trainer, tm.seed_everything), str(tmp_path / "tm"), overfit_batches)
    assert ours[:2] == theirs[:2]
    assert ours[0] == 3 * 2  # two batches an epoch (2, or a quarter of 8)
    for name, value in theirs[2].items():
        assert torch.equal(ours[2][name], value), name


def test_bad_values_are_refused():
    with pytest.raises(ValueError, match="overfit_batches"):
        tm.Trainer(overfit_batches=1.5, logger=False)
    with pytest.raises(ValueError, match="overfit_batches"):
        tm.Trainer(overfit_batches=-1, logger=False)
