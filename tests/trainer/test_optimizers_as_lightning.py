"""What ``configure_optimizers`` may return and how the schedulers step, under Lightning 2.6 and
trainmesh (Lightning's tests_pytorch/trainer/optimization/test_optimizers.py, as data): ``None``
(a warning, and a fit with no optimizer), ``([optimizer], scheduler)``, the error type of each form
Lightning refuses, its warnings for keys it ignores, and a step-interval ReduceLROnPlateau stepped
after on_train_batch_end (so it watches what that hook logged)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import differences, port, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def _model_class(L, configure, on_batch_end=None):
    class Model(L.pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)
            self.seen: list = []

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return configure(self)

        def on_train_batch_start(self, batch, batch_idx):
            scheduler = self.lr_schedulers()
            if scheduler is not None and not isinstance(scheduler, list):
                self.seen.append((getattr(scheduler, "last_epoch", None), getattr(scheduler, "best", None)))

        def on_train_batch_end(self, outputs, batch, batch_idx):
            if on_batch_end is not None:
                on_batch_end(self, batch_idx)

    return Model


def _fit(L, root, configure, on_batch_end=None, **kwargs):
    """The run's outcome: what it raised (Lightning's MisconfigurationException by that name), the
    warnings' categories and leading words, the steps, the weights, and what the schedulers showed."""
    model = _model_class(L, configure, on_batch_end)()
    before = model.layer.weight.detach().clone()
    trainer = L.pl.Trainer(**trainer_kwargs(root, max_epochs=1, logger=False, enable_checkpointing=False, **kwargs))
    loader = DataLoader(TensorDataset(torch.arange(24.0).reshape(6, 4)), batch_size=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            trainer.fit(model, loader)
        except Exception as error:  # noqa: BLE001 - the type is the outcome
            misconfigured = type(error).__name__ == "MisconfigurationException"
            return {"raised": "MisconfigurationException" if misconfigured else type(error).__name__}
    told = sorted(
        {
            (w.category.__name__, str(w.message)[:30])
            for w in caught
            if "optimizer" in str(w.message) or "lr scheduler" in str(w.message) or "OneCycleLR" in str(w.message)
        }
    )
    return {
        "warned": told,
        "global_step": trainer.global_step,
        "optimizers": len(trainer.optimizers),
        "weights_changed": not torch.equal(before, model.layer.weight),
        "seen": model.seen,
    }


def _sgd(module):
    return torch.optim.SGD(module.parameters(), lr=0.1)


CASES = {
    "none": lambda m: None,
    "two_lists_single_scheduler": lambda m: ([o := _sgd(m)], torch.optim.lr_scheduler.StepLR(o, 1)),
    "int": lambda m: 1,
    "a_dict_and_an_optimizer": lambda m: [{"optimizer": _sgd(m)}, _sgd(m)],
    "scheduler_dict_without_scheduler": lambda m: {"optimizer": _sgd(m), "lr_scheduler": {}},
    "bad_interval": lambda m: {
        "optimizer": (o := _sgd(m)),
        "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(o, 1), "interval": "batch"},
    },
    "plateau_without_monitor": lambda m: ([o := _sgd(m)], [torch.optim.lr_scheduler.ReduceLROnPlateau(o)]),
    "scheduler_of_another_optimizer": lambda m: ([_sgd(m)], [torch.optim.lr_scheduler.StepLR(_sgd(m), 1)]),
    "extra_keys": lambda m: {
        "optimizer": (o := _sgd(m)),
        "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(o, 1), "giraffe": 1},
        "zebra": 2,
    },
    "one_cycle_per_epoch": lambda m: {
        "optimizer": (o := _sgd(m)),
        "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.OneCycleLR(o, 0.1, total_steps=10)},
    },
}


@pytest.mark.parametrize("case", list(CASES))
def test_configure_optimizers_forms_as_lightning(tmp_path, case):
    """Before: None, int and a list of a dict and an optimizer raised TypeError, a scheduler
    dict's errors TypeError/ValueError (Lightning: MisconfigurationException), ``([opt], sched)``
    TypeError, a scheduler of another optimizer trained, and no key warning was given."""
    found = {name: _fit(port(name), tmp_path / name, CASES[case]) for name in ("lightning", "trainmesh")}
    assert differences(found["lightning"], found["trainmesh"]) == []


def _log_on_batch_end(module, batch_idx):
    module.log("watched", float(-batch_idx if batch_idx < 3 else batch_idx))


def _plateau(module):
    optimizer = _sgd(module)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=0)
    config = {"scheduler": scheduler, "interval": "step", "monitor": "watched", "strict": False}
    return {"optimizer": optimizer, "lr_scheduler": config}


def test_step_plateau_scheduler_watches_what_on_train_batch_end_logged(tmp_path):
    """Before: trainmesh stepped it before on_train_batch_end, so its first step found no metric
    (skipped) and each later one the previous batch's value: last_epoch/best one batch behind."""
    found = {
        name: _fit(port(name), tmp_path / name, _plateau, _log_on_batch_end) for name in ("lightning", "trainmesh")
    }
    assert found["lightning"]["seen"][1] == (1, 0.0)  # stepped after batch 0's on_train_batch_end logged 0
    assert differences(found["lightning"], found["trainmesh"]) == []
