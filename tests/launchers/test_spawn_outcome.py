"""What a ``ddp_spawn`` fit brings back to the process that called it (trainer/worker_outcome.py),
against Lightning 2.6.6.

Lightning's ``_MultiProcessingLauncher`` returns to the main process the trained weights,
``trainer.state``, ``callback_metrics`` (tensors, dtypes kept) and ``ModelCheckpoint``'s
``best_model_path``; its main process's loops never ran, so its ``global_step``,
``current_epoch`` and loggers' step stay 0 (a test after such a fit logs at step 0). trainmesh
brings back those, and the counts besides (``global_step``, ``current_epoch`` and the loggers' step),
so that a spawned fit then test leaves what one process leaves: the program below, run on 2 spawned
processes at batch 4, gives the metrics.csv rows (steps and values, to float noise), the
``callback_metrics``, ``trainer.state``, a best checkpoint and the fit's weights of Lightning 2.6.6's one
process at the global batch 8 (after ``test(ckpt_path="best")``: what Lightning's ddp_spawn leaves, below), reading at each step the two ranks' shuffled batches (GlobalBatches)
(values logged with sync_dist=True, so that both read the global batch).

Validation (``limit_val_batches=1``, each epoch) and test (``limit_test_batches=1``) values are
compared too: each of the two processes reads the first batch of its share (Lightning's
DistributedSampler's: rank r, samples r, r+2, ...), together samples 0..7, so their mean is one
process's over the global batch.
(They were left out while evaluation shards were contiguous runs of the batches: 0.455 vs 0.928.)
"""

from __future__ import annotations

import csv
import warnings

import pytest
import torch
from spawned_modules import OutcomeNet, OutcomeSteps, outcome_data
from torch.utils.data import DataLoader

import trainmesh as tm
from helpers.forked import forkserver_strategy
from helpers.lightning_order import GlobalBatches
from trainmesh.callbacks import ModelCheckpoint
from trainmesh.loggers import CSVLogger

pl = pytest.importorskip("lightning.pytorch")


class LightningNet(OutcomeSteps, pl.LightningModule):
    batch_size = 8  # the global batch of 2 processes at 4

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def train_dataloader(self):
        # At step k, the two processes' k-th batches of 4 as the shuffling sampler both Trainers
        # give a ddp run's training loader deals them (seed_everything's 0, set_epoch each epoch).
        data = outcome_data()
        return DataLoader(data, batch_size=self.batch_size, sampler=GlobalBatches(len(data), world=2, batch_size=4))


SETTINGS = dict(
    accelerator="cpu",
    max_epochs=2,
    limit_train_batches=3,
    limit_val_batches=1,
    limit_test_batches=1,
    log_every_n_steps=1,
    num_sanity_val_steps=0,
    enable_progress_bar=False,
    enable_model_summary=False,
)


def _fit_and_test(trainer_class, module_class, checkpoint_class, logger_class, seed, root, **strategy):
    seed(0)
    model = module_class()
    # mode="max": the best checkpoint is an earlier epoch's, not the last weights (test(ckpt_path="best") below)
    checkpoint = checkpoint_class(dirpath=root / "ck", monitor="train_loss", mode="max")
    trainer = trainer_class(
        logger=logger_class(root, name="logs", version=0), callbacks=[checkpoint], **SETTINGS, **strategy
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(model)
        after_fit = {
            "global_step": trainer.global_step,
            "current_epoch": trainer.current_epoch,
            "callback": {k: (float(v), v.dtype) for k, v in trainer.callback_metrics.items()},
            "state": (trainer.state.status.value, trainer.state.fn.value),
            "best": checkpoint.best_model_path.rsplit("/", 1)[-1],
        }
        fit_weights = {k: v.clone() for k, v in model.state_dict().items()}
        trainer.test(model, ckpt_path="best", verbose=False)
        after_test = {k: float(v) for k, v in trainer.callback_metrics.items()}
    for logger in trainer.loggers:
        logger.save()
    with (root / "logs" / "version_0" / "metrics.csv").open() as file:
        rows = [{k: v for k, v in row.items() if v} for row in csv.DictReader(file)]
    return after_fit, rows, model.state_dict(), fit_weights, after_test


@pytest.mark.slow
def test_spawned_fit_then_test_leaves_what_one_process_leaves(tmp_path):
    ours = _fit_and_test(
        tm.Trainer, OutcomeNet, ModelCheckpoint, CSVLogger, tm.seed_everything, tmp_path / "tm",
        strategy=forkserver_strategy(), devices=2,  # workers forked; real spawn: test_launch_processes.py
    )  # fmt: skip
    from lightning.pytorch.callbacks import ModelCheckpoint as PlCheckpoint
    from lightning.pytorch.loggers import CSVLogger as PlCSVLogger

    theirs = _fit_and_test(pl.Trainer, LightningNet, PlCheckpoint, PlCSVLogger, pl.seed_everything, tmp_path / "pl")
    (
        (our_fit, our_rows, our_weights, our_fit_weights, our_test),
        (their_fit, their_rows, _, their_fit_weights, their_test),
    ) = (
        ours,
        theirs,
    )
    assert (our_fit["global_step"], our_fit["current_epoch"], our_fit["state"], our_fit["best"]) == (
        their_fit["global_step"],
        their_fit["current_epoch"],
        their_fit["state"],
        their_fit["best"],
    )
    assert our_fit["callback"].keys() == their_fit["callback"].keys()
    for name, (value, dtype) in our_fit["callback"].items():
        assert (
            value == pytest.approx(their_fit["callback"][name][0], rel=1e-5) and dtype == their_fit["callback"][name][1]
        )
    # every row at Lightning's step and epoch (the test's too: the loggers' step came back), values to float noise
    assert [(r["step"], r["epoch"], sorted(r)) for r in our_rows] == [
        (r["step"], r["epoch"], sorted(r)) for r in their_rows
    ]
    for our_row, their_row in zip(our_rows, their_rows):
        for key in our_row:
            assert float(our_row[key]) == pytest.approx(float(their_row[key]), rel=1e-5)
    for key in our_fit_weights:
        torch.testing.assert_close(our_fit_weights[key], their_fit_weights[key], rtol=1e-6, atol=1e-7)
    # After test(ckpt_path="best") the launching process holds what Lightning's ddp_spawn leaves (its launcher
    # brings weights back after fit only, and updates callback_metrics with the workers': measured with its own
    # ddp_spawn on fit then validate/test(ckpt_path=...)): the fit's weights, not the best checkpoint's that one
    # process holds; the fit's callback_metrics updated with the test's. Before: the best's, the test's alone.
    best = torch.load(tmp_path / "tm" / "ck" / our_fit["best"], weights_only=False)["state_dict"]
    assert any(not torch.equal(best[key], our_fit_weights[key]) for key in best)  # the check can tell them apart
    assert all(torch.equal(our_weights[key], our_fit_weights[key]) for key in our_weights)
    expected = {**{k: v for k, (v, _) in their_fit["callback"].items()}, **their_test}
    assert our_test.keys() == expected.keys()
    assert all(our_test[k] == pytest.approx(expected[k], rel=1e-5) for k in expected)
