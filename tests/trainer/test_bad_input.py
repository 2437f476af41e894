"""A user's mistake gets a clear error before any work is lost."""

import pytest
import torch
from torch.utils.data import DataLoader

import trainmesh as tm
from helpers.models import DropoutNet, loaders, quiet_trainer, random_classification
from trainmesh.utilities.exceptions import MisconfigurationException


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"strategy": "ddq"}, r"strategy='ddq' is not known.*single"),
        ({"accelerator": "tpu9"}, r"accelerator='tpu9' is not known.*cpu"),
        ({"precision": "8-bit"}, r"Precision .8-bit. is invalid. Allowed precision values: .*bf16-mixed"),
        ({"accelerator": "cuda"}, r"no CUDA device is visible.*accelerator='cpu'"),
        ({"devices": 0}, r"devices=0 must be at least 1"),
        ({"max_epochs": -3}, r"`max_epochs` must be a non-negative integer or -1. You passed in -3"),
        ({"limit_train_batches": 1.5}, r"invalid value 1.5 for limit_train_batches.*\[0.0, 1.0\].*fraction"),
        ({"gradient_clip_algorithm": "both"}, r"`gradient_clip_algorithm` both is invalid.*'value', 'norm'"),
    ],
)
def test_bad_trainer_settings(kwargs, pattern):
    if kwargs.get("accelerator") == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ValueError, match=pattern):
        quiet_trainer(**kwargs)


def _module(step):
    class Broken(DropoutNet):
        def training_step(self, batch, batch_idx):
            return step(self, batch)

    return Broken()


@pytest.mark.parametrize(
    ("step", "error", "pattern"),
    [
        (lambda self, batch: self.net(batch[0]), ValueError, r"scalar tensor, got \(8, 4\)"),
        (lambda self, batch: {"total": self.net(batch[0]).sum()}, ValueError, "without a 'loss' key"),
        (lambda self, batch: "loss", TypeError, "returned str"),
        (lambda self, batch: torch.tensor(1.0), ValueError, "does not require grad"),
    ],
)
def test_bad_training_step_outputs(step, error, pattern):
    train, _ = loaders()
    with pytest.raises(error, match=pattern):
        quiet_trainer(max_epochs=1).fit(_module(step), train)


@pytest.mark.parametrize(
    ("returned", "pattern"),
    [
        ("adam", "returned str"),
        ({"lr_scheduler": None}, "without 'optimizer'"),
        ([torch.nn.Linear(1, 1)], "where a torch.optim.Optimizer was expected"),
    ],
)
def test_bad_configure_optimizers(returned, pattern):
    class Net(DropoutNet):
        def configure_optimizers(self):
            return returned

    train, _ = loaders()
    with pytest.raises(MisconfigurationException, match=pattern):  # Lightning's type (configure_optimizers forms)
        quiet_trainer(max_epochs=1).fit(Net(), train)


def test_missing_configure_optimizers_and_training_step():
    class NoOptim(tm.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(16, 4)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).sum()

    train, _ = loaders()
    # refused before the run starts, as Lightning's configuration validator refuses it
    with pytest.raises(MisconfigurationException, match=r"NoOptim defines no configure_optimizers\(\)"):
        quiet_trainer(max_epochs=1).fit(NoOptim(), train)


def test_no_train_dataloader():
    # Lightning's words, as its base class's train_dataloader() raises them
    with pytest.raises(
        ValueError, match=r"`train_dataloader` must be implemented to be used with the Lightning Trainer"
    ):
        quiet_trainer(max_epochs=1).fit(DropoutNet())


def test_ckpt_path_that_does_not_exist(tmp_path):
    """Lightning's words first (its trainer/connectors/test_checkpoint_connector.py matches them)."""
    import lightning.pytorch as pl
    from lightning.pytorch.demos.boring_classes import BoringModel

    missing = str(tmp_path / "nope.ckpt")
    lightning = pl.Trainer(default_root_dir=tmp_path, max_steps=1, logger=False, enable_progress_bar=False)
    with pytest.raises(FileNotFoundError) as theirs:
        lightning.fit(BoringModel(), ckpt_path=missing)
    train, _ = loaders()
    with pytest.raises(FileNotFoundError) as ours:
        quiet_trainer(max_epochs=1).fit(DropoutNet(), train, ckpt_path=missing)
    assert str(theirs.value) == f"Checkpoint file not found: {missing}"
    assert str(ours.value) == str(theirs.value)


def test_ckpt_path_for_another_model_names_the_keys(tmp_path):
    train, _ = loaders()
    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(DropoutNet(), train)
    path = tmp_path / "a.ckpt"
    trainer.save_checkpoint(path)

    class Wider(DropoutNet):
        def __init__(self):
            super().__init__()
            self.net[0] = torch.nn.Linear(16, 64)
            self.net[3] = torch.nn.Linear(64, 4)
            self.extra = torch.nn.Linear(2, 2)

    with pytest.raises(ValueError, match=r"net\.0\.weight: checkpoint \(32, 16\) vs model \(64, 16\).*") as info:
        quiet_trainer(max_epochs=2).fit(Wider(), train, ckpt_path=str(path))
    assert "extra.weight" in str(info.value)


def test_nan_loss_stops_with_the_step_and_weights_untouched():
    class Explodes(DropoutNet):
        def training_step(self, batch, batch_idx):
            loss = super().training_step(batch, batch_idx)
            return loss * float("nan") if self.global_step == 3 else loss

    model = Explodes()
    train, _ = loaders()
    trainer = quiet_trainer(max_epochs=1)
    snapshot = {}

    class Snapshot(tm.Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            snapshot["weights"] = {k: v.clone() for k, v in module.state_dict().items()}

    trainer = quiet_trainer(max_epochs=1, callbacks=[Snapshot()])
    with pytest.raises(FloatingPointError, match="loss is nan at global step 3"):
        trainer.fit(model, train)
    for name, value in model.state_dict().items():
        assert torch.equal(value, snapshot["weights"][name])


def test_model_and_datamodule_arguments_are_exclusive():
    train, _ = loaders()
    with pytest.raises(
        ValueError, match=r"You cannot pass `train_dataloader` or `val_dataloaders` to `trainer.fit\(datamodule=...\)`"
    ):
        quiet_trainer(max_epochs=1).fit(DropoutNet(), train, datamodule=tm.DataModule())


def test_log_rejects_non_scalars():
    class LogsVector(DropoutNet):
        def training_step(self, batch, batch_idx):
            self.log("vec", torch.ones(3))
            return super().training_step(batch, batch_idx)

    with pytest.raises(ValueError, match=r"shape \(3,\); log a scalar"):
        quiet_trainer(max_epochs=1).fit(LogsVector(), DataLoader(random_classification(16), batch_size=8))
