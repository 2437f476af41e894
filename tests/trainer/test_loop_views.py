"""``trainer.fit_loop``, ``trainer.validate_loop`` and ``trainer.test_loop`` (trainer/loop_views.py)
read in callbacks during fit, validate and test, compared with what Lightning 2.6's loop objects
show at the same hooks (tests/helpers/programs.py runs the same program under both)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import differences, outcome, run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def _counts(progress):
    both = [(t.ready, t.started, t.processed, t.completed) for t in (progress.total, progress.current)]
    return (*both, getattr(progress, "is_last_batch", None))


def loops_read_in_callbacks(L, root):
    """A callback reading the loops at each hook; a second fit after ``fit_loop.max_epochs = 3``."""

    class Reader(L.pl.Callback):
        def __init__(self):
            self.seen = []

        def _read(self, trainer, hook):
            fit = trainer.fit_loop
            epoch, val = fit.epoch_loop, fit.epoch_loop.val_loop
            self.seen.append(
                (hook, fit.max_epochs, fit.max_steps, fit.min_epochs, _counts(fit.epoch_progress))
                + (_counts(epoch.batch_progress), epoch._batches_that_stepped, epoch.global_step)
                + (fit.batch_idx, fit.total_batch_idx, _counts(val.batch_progress))
            )

        def _read_evaluation(self, trainer, hook, loop):
            self.seen.append((hook, _counts(loop.batch_progress), loop.max_batches, loop.num_dataloaders))

        def on_train_start(self, trainer, pl_module):
            self._read(trainer, "train_start")

        def on_train_epoch_start(self, trainer, pl_module):
            self._read(trainer, "train_epoch_start")
            self.seen.append(("val_check_batch", trainer.val_check_batch))

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            self._read(trainer, "train_batch_start")

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            self._read(trainer, "train_batch_end")

        def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
            self._read(trainer, "val_batch_end")
            loop = trainer.fit_loop.epoch_loop.val_loop if trainer.state.fn == "fit" else trainer.validate_loop
            self._read_evaluation(trainer, "val_batch_end", loop)

        def on_validation_epoch_end(self, trainer, pl_module):
            self._read(trainer, "val_epoch_end")

        def on_train_epoch_end(self, trainer, pl_module):
            self._read(trainer, "train_epoch_end")

        def on_train_end(self, trainer, pl_module):
            self._read(trainer, "train_end")

        def on_test_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
            self._read_evaluation(trainer, "test_batch_start", trainer.test_loop)

        def on_test_end(self, trainer, pl_module):
            self._read_evaluation(trainer, "test_end", trainer.test_loop)

    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(3, 1)

        def training_step(self, batch, batch_idx):
            return F.mse_loss(self.net(batch[0]), batch[1])

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", F.mse_loss(self.net(batch[0]), batch[1]))

        def test_step(self, batch, batch_idx, dataloader_idx=0):
            self.log("test_loss", F.mse_loss(self.net(batch[0]), batch[1]))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(10, 3, generator=g), torch.randn(10, 1, generator=g))
    train, val = DataLoader(data, batch_size=2), DataLoader(data, batch_size=4)
    reader, model = Reader(), Model()
    kwargs = dict(max_epochs=2, accumulate_grad_batches=2, val_check_interval=3, num_sanity_val_steps=1)
    trainer = L.pl.Trainer(
        **trainer_kwargs(root, logger=False, enable_checkpointing=False, callbacks=[reader], **kwargs)
    )
    trainer.fit(model, train, val)
    trainer.fit_loop.max_epochs = 3
    trainer.fit(model, train, val)
    trainer.validate(model, val)
    trainer.test(model, [val, DataLoader(data, batch_size=5)])
    trainer.test(model, val)
    return reader.seen, trainer.current_epoch, {k: v.clone() for k, v in model.state_dict().items()}


def test_loops_read_in_callbacks_as_in_lightning(tmp_path):
    """Before: ``AttributeError: 'Trainer' object has no attribute 'fit_loop'``."""
    found = run_both(loops_read_in_callbacks, tmp_path)
    assert len(found["lightning"][0]) > 50
    assert differences(found["lightning"], found["trainmesh"]) == []


def second_fit_after_more_epochs(L, root):
    """fit, ``trainer.fit_loop.max_epochs += 1``, fit again on the same Trainer, logging to a CSVLogger."""

    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(3, 1)

        def training_step(self, batch, batch_idx):
            loss = F.mse_loss(self.net(batch[0]), batch[1])
            self.log("train_loss", loss, on_epoch=True)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    g = torch.Generator().manual_seed(1)
    train = DataLoader(TensorDataset(torch.randn(8, 3, generator=g), torch.randn(8, 1, generator=g)), batch_size=2)
    model = Model()
    logger = L.loggers.CSVLogger(root, name="twice")
    trainer = L.pl.Trainer(
        **trainer_kwargs(root, max_epochs=1, logger=logger, log_every_n_steps=1, enable_checkpointing=False)
    )
    trainer.fit(model, train)
    trainer.fit_loop.max_epochs += 1
    trainer.fit(model, train)
    return outcome(trainer, model, root, stepped=trainer.fit_loop.epoch_loop._batches_that_stepped)


def test_a_second_fit_carries_the_loggers_step_on(tmp_path):
    """Before: the second fit's metrics.csv rows restarted at step 0 (trainmesh began each fit's
    count of stepped batches at 0; Lightning's loop carries it on: steps 4 to 7)."""
    found = run_both(second_fit_after_more_epochs, tmp_path)
    steps = [row["step"] for row in found["lightning"]["csv"]["twice/version_0/metrics.csv"]]
    assert steps[-1] == "7"
    assert differences(found["lightning"], found["trainmesh"]) == []


def writes_during_fit(L, root):
    """A callback writes Lightning's three running-loop members: ``fit_loop.max_epochs += 1`` in
    on_fit_start (one more epoch), and at epoch 1's start ``max_batches += 1`` and ``_skip_backward``
    with a window of the epoch's length (training_step without backward, one optimizer step at its end,
    on the gradients the last step left), put back at its end; what the hooks read meanwhile."""

    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(3, 1)
            self.seen = []

        def training_step(self, batch, batch_idx):
            t = self.trainer
            loop = t.fit_loop
            self.seen.append(
                (t.current_epoch, t.global_step, loop.max_epochs, t.num_training_batches, loop._skip_backward)
            )
            return F.mse_loss(self.net(batch[0]), batch[1])

        def on_before_backward(self, loss):
            self.seen.append(("backward", self.trainer.current_epoch))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

    class Lengthen(L.pl.Callback):
        def on_fit_start(self, trainer, pl_module):
            trainer.fit_loop.max_epochs += 1

        def on_train_epoch_start(self, trainer, pl_module):
            if trainer.current_epoch == 1:
                trainer.fit_loop.max_batches += 1
                trainer.fit_loop._skip_backward = True
                trainer.accumulate_grad_batches = trainer.fit_loop.max_batches

        def on_train_epoch_end(self, trainer, pl_module):
            trainer.fit_loop._skip_backward = False

    g = torch.Generator().manual_seed(1)
    train = DataLoader(TensorDataset(torch.randn(8, 3, generator=g), torch.randn(8, 1, generator=g)), batch_size=2)
    model = Model()
    trainer = L.pl.Trainer(**trainer_kwargs(root, max_epochs=1, logger=False, enable_checkpointing=False))
    trainer.callbacks.append(Lengthen())
    trainer.fit(model, train)
    return outcome(trainer, model, root, seen=model.seen, max_epochs=trainer.max_epochs)


def test_writes_during_fit_as_in_lightning(tmp_path):
    """Before: ``cannot change while the Trainer runs`` (the loop read its settings at the start)."""
    found = run_both(writes_during_fit, tmp_path)
    seen = found["lightning"]["extra"]["seen"]
    assert seen[-1] == (1, 4, 2, 5, True) and ("backward", 1) not in seen
    assert found["lightning"]["global_step"] == 5
    assert differences(found["lightning"], found["trainmesh"]) == []


def test_writes_into_the_loops_work_between_runs_or_are_refused(tmp_path):
    import trainmesh as tm

    class Model(tm.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(3, 1)

        def training_step(self, batch, batch_idx):
            if self.trainer.current_epoch == 0 and batch_idx == 0:
                with pytest.raises(AttributeError, match="cannot change while the Trainer runs"):
                    self.trainer.fit_loop.min_epochs = 9
            return self.net(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = tm.Trainer(**trainer_kwargs(tmp_path, max_epochs=1, logger=False, enable_checkpointing=False))
    trainer.fit_loop.epoch_loop.max_steps = 3
    trainer.fit_loop.min_epochs = 1
    assert (trainer.max_steps, trainer.min_epochs) == (3, 1)
    trainer.fit(Model(), DataLoader(TensorDataset(torch.randn(4, 3)), batch_size=1))
    assert trainer.global_step == 1 * 3
    with pytest.raises(AttributeError, match="read-only"):
        trainer.fit_loop.max_steps = 5  # no setter in Lightning 2.6 either
    with pytest.raises(AttributeError, match="read-only"):
        trainer.fit_loop.epoch_loop.batch_progress.current.completed = 0
    with pytest.raises(AttributeError, match="read-only"):
        trainer.validate_loop.batch_progress = None
    with pytest.raises(AttributeError, match="Lightning 2.x removed it"):
        trainer.fit_loop.running_loss  # noqa: B018


def val_check_batch_without_training_batches(L, root):
    """A fit whose training is limited to no batch: the trainer's val_check_batch afterwards."""

    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return F.mse_loss(self.net(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = DataLoader(TensorDataset(torch.ones(4, 2), torch.zeros(4, 1)), batch_size=2)
    found = {}
    for limit in (0, 2):
        trainer = L.pl.Trainer(**trainer_kwargs(root / str(limit), max_epochs=1, limit_train_batches=limit))
        trainer.fit(Model(), data)
        found[limit] = trainer.val_check_batch
    return found


def test_val_check_batch_stays_none_when_no_training_batch_runs(tmp_path):
    """Before: 1 after a fit limited to 0 training batches, where Lightning leaves it None."""
    found = run_both(val_check_batch_without_training_batches, tmp_path)
    assert found["lightning"] == {0: None, 2: 2}
    assert differences(found["lightning"], found["trainmesh"]) == []


def epoch_progress_across_a_resume(L, root):
    """Fit 2 epochs saving each epoch's end and every 3 steps, then resume on new Trainers, reading
    ``fit_loop.epoch_progress`` at the hooks: from the last epoch's end with nothing left to train and
    with one more epoch, and from inside the first epoch."""

    class Reader(L.pl.Callback):
        def __init__(self):
            self.seen = []

        def _read(self, trainer, hook):
            self.seen.append((hook, _counts(trainer.fit_loop.epoch_progress), trainer.current_epoch))

        def on_train_start(self, trainer, pl_module):
            self._read(trainer, "on_train_start")

        def on_train_epoch_start(self, trainer, pl_module):
            self._read(trainer, "on_train_epoch_start")

        def on_train_epoch_end(self, trainer, pl_module):
            self._read(trainer, "on_train_epoch_end")

        def on_train_end(self, trainer, pl_module):
            self._read(trainer, "on_train_end")

    class Regression(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(3, 1)

        def training_step(self, batch, batch_idx):
            return F.mse_loss(self.net(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = TensorDataset(torch.randn(8, 3, generator=torch.Generator().manual_seed(0)), torch.randn(8, 1))
    seen = []
    for max_epochs, resume in ((2, None), (2, "epoch=1-step=8"), (3, "epoch=1-step=8"), (3, "epoch=0-step=3")):
        reader = Reader()
        saver = L.pl.callbacks.ModelCheckpoint(dirpath=root / "ckpt", save_top_k=-1)
        inside = L.pl.callbacks.ModelCheckpoint(dirpath=root / "ckpt", save_top_k=-1, every_n_train_steps=3)
        callbacks = [reader, saver, inside] if resume is None else [reader]
        trainer = L.pl.Trainer(
            **trainer_kwargs(root, max_epochs=max_epochs, logger=False, callbacks=callbacks, limit_val_batches=0)
        )
        ckpt = str(root / "ckpt" / f"{resume}.ckpt") if resume else None
        trainer.fit(Regression(), DataLoader(data, batch_size=2), ckpt_path=ckpt)
        seen.append((reader.seen, _counts(trainer.fit_loop.epoch_progress)))
    return seen


def test_epoch_progress_after_resuming_from_an_epoch_end_save(tmp_path):
    """Before: resumed from the save of epoch 1's end, trainmesh's ``epoch_progress`` counted one epoch
    less than Lightning's (processed 1 where Lightning's checkpoint holds 2; 2 after one more epoch, not 3);
    resumed inside an epoch, one epoch less made ready and started."""
    found = run_both(epoch_progress_across_a_resume, tmp_path)
    assert found["lightning"][1][1][0][2] == 2  # resumed with nothing left: Lightning's total.processed
    assert differences(found["lightning"], found["trainmesh"]) == []
