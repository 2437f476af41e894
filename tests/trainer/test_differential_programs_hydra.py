"""What the lightning-hydra-template (and programs built from it) rely on, each written as our own
small program and run under Lightning 2.6 and under its port (tests/helpers/programs.py), compared
as data (campaign of issue 36, branch c-hydra).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import differences, outcome, run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")
torchmetrics = pytest.importorskip("torchmetrics")


def _loader(n: int, seed: int) -> DataLoader:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    return DataLoader(TensorDataset(x, (x.sum(1) > 0).long()), batch_size=4)


def metric_objects_logged(L, root):
    """Metric objects logged with self.log (the template's MNISTLitModule): the epoch hooks call
    compute() on them (a running best over epochs), and on_*_end still sees the epoch's state."""
    from torchmetrics import MaxMetric, MeanMetric
    from torchmetrics.classification import Accuracy

    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(4, 2)
            self.train_loss, self.val_acc, self.val_best = (
                MeanMetric(),
                Accuracy("multiclass", num_classes=2),
                MaxMetric(),
            )
            self.seen = []

        def training_step(self, batch, batch_idx):
            loss = nn.functional.cross_entropy(self.net(batch[0]), batch[1])
            self.train_loss(loss)
            self.log("train/loss", self.train_loss, on_step=True, on_epoch=True, prog_bar=True)
            return loss

        def on_train_epoch_end(self):
            self.seen.append(("train_epoch_end", float(self.train_loss.compute())))

        def validation_step(self, batch, batch_idx):
            self.val_acc(self.net(batch[0]).argmax(1), batch[1])
            self.log("val/acc", self.val_acc, prog_bar=True)

        def on_validation_epoch_end(self):
            self.val_best(self.val_acc.compute())
            self.log("val/acc_best", self.val_best.compute(), prog_bar=True)

        def on_validation_end(self):
            self.seen.append(("validation_end", float(self.val_acc.compute()), float(self.val_best.compute())))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.5)

    model = Model()
    kwargs = trainer_kwargs(root, max_epochs=3, logger=L.loggers.CSVLogger(root), enable_checkpointing=False)
    trainer = L.pl.Trainer(log_every_n_steps=1, **kwargs)
    trainer.fit(model, _loader(16, 0), _loader(12, 1))
    return outcome(trainer, model, root, seen=model.seen)


def test_metric_objects_are_computed_at_epoch_end_and_reset_after_the_loop_s_end_hooks(tmp_path):
    found = run_both(metric_objects_logged, tmp_path)
    assert differences(found["lightning"], found["trainmesh"]) == []
    best = [s[2] for s in found["lightning"]["extra"]["seen"] if s[0] == "validation_end"]
    assert len(best) == 4 and best[-1] > 0  # the sanity check's, then one per epoch: a running best


def test_rank_zero_only_has_lightning_s_rank():
    """The template's RankedLogger reads ``rank_zero_only.rank`` to prefix its lines."""
    from lightning.pytorch.utilities import rank_zero as theirs

    from trainmesh.utilities import rank_zero as ours

    assert ours.rank_zero_only.rank == theirs.rank_zero_only.rank == 0
    message = ours.rank_prefixed_message("Instantiating", ours.rank_zero_only.rank)
    assert message == theirs.rank_prefixed_message("Instantiating", theirs.rank_zero_only.rank)
    calls = []
    ours.rank_zero_only.rank = 1  # as Lightning's strategies set it on another rank
    try:
        ours.rank_zero_only(lambda: calls.append(1))()
    finally:
        ours.rank_zero_only.rank = None
    assert calls == [] and ours.rank_zero_only.rank == 0


def fast_dev_run_then_test_best(L, root):
    """The template's train(): with no callbacks configured (its debug configs) the default
    checkpointing is on, and after fit it reads ``trainer.checkpoint_callback.best_model_path``."""

    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(4, 2)

        def training_step(self, batch, batch_idx):
            return nn.functional.cross_entropy(self.net(batch[0]), batch[1])

        def test_step(self, batch, batch_idx):
            self.log("test/loss", nn.functional.cross_entropy(self.net(batch[0]), batch[1]))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.5)

    model = Model()
    trainer = L.pl.Trainer(**trainer_kwargs(root, fast_dev_run=True))
    trainer.fit(model, _loader(16, 0))
    callback = trainer.checkpoint_callback
    best = callback.best_model_path
    trainer.test(model, _loader(8, 1), ckpt_path=best or None)
    return outcome(trainer, model, root, callback=type(callback).__name__, best=best, last=callback.last_model_path)


def test_fast_dev_run_keeps_the_default_checkpoint_callback_saving_nothing(tmp_path):
    found = run_both(fast_dev_run_then_test_best, tmp_path)
    assert differences(found["lightning"], found["trainmesh"]) == []
    assert found["trainmesh"]["extra"]["callback"] == "ModelCheckpoint" and found["trainmesh"]["files"] == []


def printed_results(L, root):
    """What trainer.test and trainer.validate print (two validation loaders, one name kept
    without its loader's suffix): the template's logs show the test table."""
    import contextlib
    import io

    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(4, 2)

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            self.log("val/loss", nn.functional.cross_entropy(self.net(batch[0]), batch[1]))
            if dataloader_idx == 0:
                self.log("seen", 1.0, add_dataloader_idx=False)

        def test_step(self, batch, batch_idx):
            self.log("test/a_rather_long_metric_name", nn.functional.cross_entropy(self.net(batch[0]), batch[1]))

    model, printed = Model(), io.StringIO()
    trainer = L.pl.Trainer(**trainer_kwargs(root, logger=False, enable_checkpointing=False))
    with contextlib.redirect_stdout(printed):
        tested = trainer.test(model, _loader(8, 1))
        validated = trainer.validate(model, [_loader(8, 1), _loader(8, 2)])
    # the table's lines (trainmesh prints its one-line run summary before each run besides)
    table = [line for line in printed.getvalue().splitlines() if line[:1] in "┏┃┡│└"]
    return outcome(trainer, model, root, printed=table, returned=repr([tested, validated]))


def test_validate_and_test_print_lightning_s_table(tmp_path):
    found = run_both(printed_results, tmp_path)
    assert differences(found["lightning"], found["trainmesh"]) == []
    assert any("Validate metric" in line for line in found["trainmesh"]["extra"]["printed"])


def hyperparameters_of_a_config(L, root):
    """The template's log_hyperparameters: nested dicts of a Hydra config (interpolation strings
    kept) sent with logger.log_hyperparams, beside a DictConfig value, to CSV and TensorBoard."""
    from omegaconf import OmegaConf

    config = {"model": {"_target_": "src.Model", "optimizer": {"lr": 0.001, "_partial_": True}}, "tags": ["dev"]}
    config |= {"model/params/total": 10, "data": {"dir": "${paths.data_dir}"}, "ckpt_path": None}
    config |= {"resolved": OmegaConf.create({"a": 1, "b": "${a}"})}
    loggers = [L.loggers.CSVLogger(root, name="csv"), L.loggers.TensorBoardLogger(root, name="tb")]
    for logger in loggers:
        logger.log_hyperparams(config)
        logger.save()
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("hparams.yaml"))}


def test_hparams_yaml_is_written_as_lightning_writes_it_with_omegaconf_installed(tmp_path):
    found = run_both(hyperparameters_of_a_config, tmp_path)
    assert found["lightning"] == found["trainmesh"] and len(found["trainmesh"]) == 2
    assert next(iter(found["trainmesh"].values())).startswith("model:\n  _target_: src.Model")  # in its order


# The template's configs' _target_ paths, and the port's (lightning.pytorch -> trainmesh); its model
# summary callback is left out: trainmesh's summary prints its own table (docs/how-to/lightning.md)
TARGETS = ["trainer.Trainer", "callbacks.ModelCheckpoint", "callbacks.EarlyStopping"]
TARGETS += ["callbacks.RichProgressBar", "loggers.csv_logs.CSVLogger", "loggers.tensorboard.TensorBoardLogger"]
TARGETS += ["loggers.wandb.WandbLogger", "loggers.mlflow.MLFlowLogger"]


@pytest.mark.parametrize("target", TARGETS)
def test_the_template_s_targets_resolve_in_the_port(target):
    import importlib

    module, name = target.rsplit(".", 1)
    assert hasattr(importlib.import_module(f"lightning.pytorch.{module}"), name)
    assert isinstance(getattr(importlib.import_module(f"trainmesh.{module}"), name), type)  # hydra's _locate
