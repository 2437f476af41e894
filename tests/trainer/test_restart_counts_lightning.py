"""The loop counters a resumed ``fit(ckpt_path=...)`` shows, under Lightning 2.6.6 and trainmesh, for
checkpoints saved at several points (``trainer.save_checkpoint`` in ``on_train_batch_end`` inside an
epoch and at its last batch, in a mid-epoch ``on_validation_end``, in the validation after the fit's
last batch, inside an accumulation window, after a fit that ``max_steps`` stopped inside an epoch or at
its last batch, resumed under a larger ``max_steps``): ``global_step``, ``current_epoch``, the fit loop's
``epoch_progress``, the epoch loop's ``batch_progress`` and ``_batches_that_stepped`` (the loggers'
step), the validation loop's ``batch_progress``, ``restarting`` and the loops' ``state_dict()``, read at ``on_train_start``, at the
first ``on_train_batch_start`` and at ``on_train_end``, the hooks called and the "dataloader is not resumable" warning.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import differences, run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")

# (the first fit's settings, where it saves: hook and (epoch, batch_idx) or epoch; the resumed fit's settings)
_CASES = {
    # inside the epoch: Lightning's restored batch progress holds the saved batch not completed until
    # its epoch loop starts, which counts that batch's step in _batches_that_stepped (the loggers' step)
    "batch_end_mid_epoch": (dict(max_epochs=2), ("on_train_batch_end", (0, 1)), dict(max_epochs=2)),
    # at the epoch's last batch: as the next epoch starts the validation due there counts as run
    "batch_end_last_batch": (dict(max_epochs=2), ("on_train_batch_end", (0, 3)), dict(max_epochs=2)),
    # at the fit's last batch: nothing left to train, still on_train_start and on_train_end
    "batch_end_last_of_fit": (dict(max_epochs=2), ("on_train_batch_end", (1, 3)), dict(max_epochs=2)),
    # inside an accumulation window: no step to count
    "batch_end_accumulating": (
        dict(max_epochs=2, accumulate_grad_batches=2),
        ("on_train_batch_end", (0, 0)),
        dict(max_epochs=2, accumulate_grad_batches=2),
    ),
    # the validation after batch 2 of 4: its progress and the step before it as saved until the epoch loop starts
    "validation_mid_epoch": (
        dict(max_epochs=2, val_check_interval=2),
        ("on_validation_end", (1, 1)),
        dict(max_epochs=2, val_check_interval=2),
    ),
    # the validation after the fit's last batch: is_last_batch kept through the rerun epoch end
    "validation_at_fit_end": (dict(max_epochs=2), ("on_validation_end", (1, 3)), dict(max_epochs=2)),
    # saved after a fit that max_steps stopped inside epoch 1: the epoch counts as completed, yet
    # Lightning's resume trains that epoch's number again from the saved batch index (a fresh iterator)
    "max_steps_mid_epoch": (dict(max_steps=6), ("after_fit", None), dict(max_steps=14)),
    # ... and at epoch 1's last batch: Lightning runs an empty epoch 2 (its loader still iterated)
    "max_steps_epoch_end": (dict(max_steps=8), ("after_fit", None), dict(max_steps=14)),
    # resumed without max_steps: its fit loop does not restart, the next epoch is trained whole
    "max_steps_mid_epoch_by_epochs": (dict(max_steps=6), ("after_fit", None), dict(max_epochs=3)),
}
_MID_EPOCH = ("batch_end_mid_epoch", "batch_end_accumulating", "validation_mid_epoch")


def _progress(progress) -> tuple:
    counts = tuple(
        (getattr(progress, part).ready, getattr(progress, part).started, getattr(progress, part).processed)
        + (getattr(progress, part).completed,)
        for part in ("total", "current")
    )
    return counts + (getattr(progress, "is_last_batch", None),)


def _counters(trainer) -> dict:
    fit_loop = trainer.fit_loop
    return {
        "step": trainer.global_step,
        "epoch": trainer.current_epoch,
        "epochs": _progress(fit_loop.epoch_progress),
        "batches": _progress(fit_loop.epoch_loop.batch_progress),
        "stepped": fit_loop.epoch_loop._batches_that_stepped,
        "validation": _progress(fit_loop.epoch_loop.val_loop.batch_progress),
        "restarting": fit_loop.restarting,
        "state_dict": fit_loop.state_dict(),  # Lightning's keys, as a checkpoint saved now holds them
        "val_state_dict": fit_loop.epoch_loop.val_loop.state_dict(),
    }


def resumed(L, root: Path, case: str, written_by: str, exact: bool = False) -> dict:
    first, (save_hook, at), second = _CASES[case]
    saved = str(root / "saved.ckpt")
    if written_by == "lightning" and root.name == "trainmesh":  # the checkpoint Lightning's leg wrote
        saved = str(root.parent / "lightning" / "saved.ckpt")
    seen: dict = {"hooks": [], "samples": []}

    class Saver(L.pl.Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            if save_hook == "on_train_batch_end" and (trainer.current_epoch, batch_idx) == at:
                trainer.save_checkpoint(saved)

        def on_validation_end(self, trainer, module):
            done = trainer.fit_loop.epoch_loop.batch_progress.current.completed - 1
            if save_hook == "on_validation_end" and not trainer.sanity_checking and (trainer.current_epoch, done) == at:
                trainer.save_checkpoint(saved)

    class Recorder(L.pl.Callback):
        def on_train_start(self, trainer, module):
            seen["hooks"].append("on_train_start")
            seen["on_train_start"] = _counters(trainer)

        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            seen["hooks"].append(f"on_train_batch_start {trainer.current_epoch} {batch_idx}")
            seen.setdefault("first_batch", _counters(trainer))

        def on_train_epoch_start(self, trainer, module):
            seen["hooks"].append(f"on_train_epoch_start {trainer.current_epoch}")

        def on_validation_start(self, trainer, module):
            seen["hooks"].append(f"on_validation_start {trainer.current_epoch}")

        def on_train_epoch_end(self, trainer, module):
            seen["hooks"].append(f"on_train_epoch_end {trainer.current_epoch}")

        def on_train_end(self, trainer, module):
            seen["hooks"].append("on_train_end")
            seen["on_train_end"] = _counters(trainer)

    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            seen["samples"].append(batch[0].tolist())
            return self.net(batch[0]).pow(2).mean()

        def validation_step(self, batch, batch_idx):
            self.log("val", self.net(batch[0]).pow(2).mean())

        def train_dataloader(self):
            # shuffled: a resume reads from the generators it has (Lightning's) or the saved ones (exact)
            return DataLoader(TensorDataset(torch.arange(16.0).view(8, 2) / 10), batch_size=2, shuffle=True)

        def val_dataloader(self):
            return DataLoader(TensorDataset(torch.ones(4, 2)), batch_size=2)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    settings = dict(logger=False, enable_checkpointing=False, num_sanity_val_steps=0)
    if saved.startswith(str(root)):
        first_model = Model()  # it goes on to the end after saving: the uninterrupted run
        first_trainer = L.pl.Trainer(**trainer_kwargs(root, callbacks=[Saver()], **settings, **first))
        first_trainer.fit(first_model)
        if save_hook == "after_fit":
            first_trainer.save_checkpoint(saved)
        if exact:
            seen["uninterrupted"] = (seen["samples"], first_model.net.weight.tolist())
        seen["samples"] = []
    L.pl.seed_everything(1)  # the resumed fit's own generators (the lightning case's trainmesh leg ran no first fit)
    model = Model()
    own = dict(exact_resume=True) if exact else {}  # trainmesh's own argument: the rest of the saved epoch
    trainer = L.pl.Trainer(**trainer_kwargs(root, callbacks=[Recorder()], **settings, **second, **own))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model, ckpt_path=saved)
    # Lightning's PossibleUserWarning where the global step ends inside an epoch and the loader keeps no state
    # (exact_resume=True: none, the rest of the epoch is read exactly); before: trainmesh never said it
    seen["warned"] = [type(w.message).__name__ for w in caught if "your dataloader is not resumable" in str(w.message)]
    seen["end"] = _counters(trainer)
    seen["weights"] = model.net.weight.tolist()
    return seen


@pytest.mark.parametrize("written_by", ["own", "lightning"])
@pytest.mark.parametrize("case", sorted(_CASES))
def test_a_resumed_fit_shows_lightning_s_loop_counters(case, written_by, tmp_path):
    """Before: trainmesh showed the saved batch completed at on_train_start, the validation loop's
    progress at 0 (Lightning restores it), ``_batches_that_stepped`` one lower for the whole resumed
    fit after a save in on_train_batch_end (the loggers' steps one lower), one higher at on_train_start
    after a save in a validation; it called neither on_train_start nor on_train_end resuming from the
    fit's last on_train_batch_end, and left ``is_last_batch`` False through a rerun epoch end.
    ``written_by="lightning"``: trainmesh resumes the file Lightning wrote (before: refused), reading the
    batches Lightning's resume reads, to the same weights. ``written_by="own"``: each resumes its own file
    and reads the samples Lightning's resume reads, to its weights (before: trainmesh restored the saved
    generators and read the rest of the saved epoch, the uninterrupted run's samples: 4 of 6 cases differed).
    ``max_steps_*`` (before: trainmesh trained the next epoch whole, Lightning from the saved batch index,
    an empty epoch where that was the last; other weights, epochs and loggers' steps)."""
    found = run_both(lambda L, root: resumed(L, root, case, written_by), tmp_path)
    theirs, ours = found["lightning"], found["trainmesh"]
    assert differences(theirs, ours) == []


@pytest.mark.parametrize("case", _MID_EPOCH)
def test_exact_resume_reads_the_rest_of_the_uninterrupted_run(case, tmp_path):
    """``Trainer(exact_resume=True)`` (trainmesh's own): the resumed fit reads the samples the run that
    never stopped read after its save and ends with its weights (Lightning's resume reads afresh)."""
    from helpers.programs import port

    L = port("trainmesh")
    L.pl.seed_everything(0)
    seen = resumed(L, tmp_path, case, "own", exact=True)
    whole, weights = seen["uninterrupted"]
    assert 0 < len(seen["samples"]) < len(whole)
    assert seen["samples"] == whole[len(whole) - len(seen["samples"]) :]
    assert seen["weights"] == weights
    assert seen["warned"] == []
