"""What ``configure_optimizers`` may return, refused in Lightning 2.6's words (its exception type and first
sentence, which programs and Lightning's own trainer/optimization/test_optimizers.py match), trainmesh's
how-to-fix after them. Before, each was trainmesh's own sentence only."""

import importlib
import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

pl = pytest.importorskip("lightning.pytorch")
FRAMEWORKS = {"lightning": pl, "trainmesh": importlib.import_module("trainmesh")}


def _sgd(module):
    return torch.optim.SGD(module.parameters(), lr=0.1)


def _plateau(module):
    return torch.optim.lr_scheduler.ReduceLROnPlateau(module.sgd)


class _OwnStep:
    """A scheduler that is not torch's, whose step is of its own signature (timm's step(epoch))."""

    def __init__(self, optimizer, *, stateful=True):
        self.optimizer = optimizer
        if stateful:
            self.state_dict, self.load_state_dict = dict, lambda state: None

    def step(self, epoch): ...


# name -> (what configure_optimizers returns, Lightning's first words[, its exception type when not
# MisconfigurationException])
CASES = {
    "scheduler_not_torchs": (
        lambda m: {"optimizer": m.sgd, "lr_scheduler": _OwnStep(m.sgd)},
        "The provided lr scheduler `_OwnStep` doesn't follow PyTorch's LRScheduler API. You should override",
    ),
    "scheduler_not_torchs_on_plateau": (
        lambda m: {
            "optimizer": m.sgd,
            "lr_scheduler": {"scheduler": _OwnStep(m.sgd), "reduce_on_plateau": True, "monitor": "x"},
        },
        "The provided lr scheduler `_OwnStep` doesn't follow PyTorch's LRScheduler API. You should override",
    ),
    "scheduler_without_state": (
        lambda m: {"optimizer": m.sgd, "lr_scheduler": _OwnStep(m.sgd, stateful=False)},
        "The provided lr scheduler `_OwnStep` is invalid. It should have `state_dict` and `load_state_dict`",
        TypeError,
    ),
    "unknown": (lambda m: 1, "Unknown configuration for model optimizers"),
    "dict_as_optimizer": (lambda m: [{"optimizer": m.sgd}, [m.sgd]], "Unknown configuration for model optimizers"),
    "no_scheduler_key": (
        lambda m: {"optimizer": m.sgd, "lr_scheduler": {"monitor": "x"}},
        'The lr scheduler dict must have the key "scheduler" with its item being an lr scheduler',
    ),
    "bad_interval": (
        lambda m: {"optimizer": m.sgd, "lr_scheduler": {"scheduler": _plateau(m), "interval": "hour", "monitor": "x"}},
        'The "interval" key in lr scheduler dict must be "step" or "epoch" but is "hour"',
    ),
    "plateau_without_monitor": (
        lambda m: ([m.sgd], [_plateau(m)]),
        "`configure_optimizers` must include a monitor when a `ReduceLROnPlateau` scheduler is used",
    ),
    "plateau_metric_not_logged": (
        lambda m: {"optimizer": m.sgd, "lr_scheduler": {"scheduler": _plateau(m), "monitor": "giraffe"}},
        "ReduceLROnPlateau conditioned on metric giraffe which is not available. Available metrics are: [",
    ),
}


def _error(name, case):
    framework = FRAMEWORKS[name]
    returned = CASES[case][0]

    class Net(framework.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)
            self.sgd = _sgd(self)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return returned(self)

    trainer = framework.Trainer(
        max_epochs=1, accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            trainer.fit(Net(), DataLoader(TensorDataset(torch.randn(2, 2)), batch_size=1))
        except Exception as error:  # noqa: BLE001 - the error is what is compared
            return error
    raise AssertionError(f"{name}: {case} ran")


@pytest.mark.parametrize("case", sorted(CASES))
def test_configure_optimizers_refused_in_lightning_s_words(case):
    words, *kind = CASES[case][1:]
    lightning, trainmesh = _error("lightning", case), _error("trainmesh", case)
    assert str(lightning).startswith(words), str(lightning)
    if kind:
        assert type(lightning) is kind[0] and type(trainmesh) is kind[0]
    else:
        assert type(lightning).__name__ == "MisconfigurationException"
        assert isinstance(trainmesh, FRAMEWORKS["trainmesh"].utilities.exceptions.MisconfigurationException)
    assert str(trainmesh).startswith(words), str(trainmesh)


def _frequency_warnings(framework, *, optimizer_idx):
    """Warnings of a fit whose configure_optimizers gives a 1.x "frequency" (l-progs13 p10b: a manual GAN)."""

    class Net(framework.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)
            self.automatic_optimization = optimizer_idx

        def training_step(self, batch, batch_idx):
            loss = self.layer(batch[0]).pow(2).mean()
            if not self.automatic_optimization:
                self.manual_backward(loss)
                self.optimizers().step()
            return loss

        def configure_optimizers(self):
            return [{"optimizer": _sgd(self), "frequency": 2}]

    if optimizer_idx:  # Lightning 1.x's turns: training_step names optimizer_idx (only trainmesh runs it)
        Net.training_step = lambda self, batch, batch_idx, optimizer_idx=0: self.layer(batch[0]).pow(2).mean()
    trainer = framework.Trainer(
        max_epochs=1, accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(Net(), DataLoader(TensorDataset(torch.randn(2, 2)), batch_size=1))
    return [str(w.message) for w in caught if "unsupported keys" in str(w.message)]


def test_a_frequency_key_is_warned_of_as_lightning_2_warns_unless_training_step_takes_optimizer_idx():
    expected = ["Found unsupported keys in the optimizer configuration: {'frequency'}"]
    assert _frequency_warnings(pl, optimizer_idx=False) == expected
    # before: trainmesh took "frequency" as 1.x's everywhere and said nothing
    assert _frequency_warnings(FRAMEWORKS["trainmesh"], optimizer_idx=False) == expected
    assert _frequency_warnings(FRAMEWORKS["trainmesh"], optimizer_idx=True) == []  # 1.9.5's valid key
