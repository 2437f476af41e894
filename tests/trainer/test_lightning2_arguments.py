"""Lightning 2.6's Trainer arguments ``barebones``, ``detect_anomaly``, ``enable_autolog_hparams``,
``reload_dataloaders_every_n_epochs`` (its check) and ``model_registry``, against Lightning itself:
the same program under both, and the same errors with the same texts."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm

pl = pytest.importorskip("lightning.pytorch")

FRAMEWORKS = {"lightning": pl, "trainmesh": tm}
QUIET = dict(accelerator="cpu", devices=1, enable_model_summary=False, enable_progress_bar=False)


def _loader():
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(16, 4, generator=g), torch.randn(16, 1, generator=g)), batch_size=4)


def _module(L, *, nan_gradient: bool = False):
    class Net(L.LightningModule):
        def __init__(self, lr: float = 0.1) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            loss = torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])
            if nan_gradient:
                # sqrt's gradient at 0 is inf, times 0: NaN in the backward, a finite loss
                loss = loss + torch.sqrt(self.layer.weight * 0).sum()
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

    return Net()


def _error(framework, exception, **arguments):
    with pytest.raises(exception) as caught:
        FRAMEWORKS[framework].Trainer(**arguments)
    return str(caught.value)


BAREBONES_REFUSED = [
    dict(enable_checkpointing=True),
    dict(logger=True),
    dict(enable_progress_bar=True),
    dict(log_every_n_steps=1),
    dict(enable_model_summary=True),
    dict(num_sanity_val_steps=2),
    dict(fast_dev_run=True),
    dict(detect_anomaly=True),
    dict(profiler="simple"),
]


@pytest.mark.parametrize("passed", BAREBONES_REFUSED, ids=lambda d: next(iter(d)))
def test_barebones_refuses_what_lightning_refuses_with_its_text(passed):
    theirs = _error("lightning", ValueError, barebones=True, **passed)
    assert _error("trainmesh", ValueError, barebones=True, **passed) == theirs


def _fit(framework, tmp_path, **arguments):
    L = FRAMEWORKS[framework]
    L.seed_everything(0)
    model = _module(L, nan_gradient=arguments.pop("nan_gradient", False))
    trainer = L.Trainer(default_root_dir=tmp_path / framework, max_epochs=1, **{**QUIET, **arguments})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model, _loader())
    return trainer, model, sorted({str(w.message) for w in caught if "barebones" in str(w.message)})


def test_barebones_fit_turns_off_what_lightning_turns_off(tmp_path):
    """No logger, no checkpoint callback, no progress bar, no sanity check; self.log warns and
    drops its value; the same weights."""
    outcomes = {}
    for name in FRAMEWORKS:
        trainer, model, told = _fit(name, tmp_path, barebones=True)
        outcomes[name] = (
            trainer.loggers,
            trainer.checkpoint_callbacks,
            trainer.progress_bar_callback,
            trainer.num_sanity_val_steps,
            trainer.log_every_n_steps,
            dict(trainer.callback_metrics),
            told,
            trainer.barebones,
        )
        outcomes[name + "_weights"] = model.layer.weight.detach().clone()
    assert outcomes["trainmesh"] == outcomes["lightning"]
    assert torch.equal(outcomes["trainmesh_weights"], outcomes["lightning_weights"])


def test_detect_anomaly_raises_lightnings_error(tmp_path):
    """A NaN made in the backward: under anomaly mode both stop with torch's error naming the
    function; without it both train on (the NaN reaches the weights)."""
    messages = {}
    for name in FRAMEWORKS:
        with pytest.raises(RuntimeError) as caught:
            _fit(name, tmp_path, detect_anomaly=True, nan_gradient=True)
        messages[name] = str(caught.value)
    assert messages["trainmesh"] == messages["lightning"]
    assert "returned nan values" in messages["lightning"]


def _logger_class(L, calls, folder):
    class Recording(L.loggers.Logger):
        name, version = "rec", 0
        # trainmesh's Logger asks each logger for its folder (Lightning's falls back to save_dir)
        log_dir = save_dir = str(folder)

        def log_hyperparams(self, params, *args, **kwargs):
            calls.append(dict(params))

        def log_metrics(self, metrics, step=None):
            pass

    return Recording


@pytest.mark.parametrize("autolog", [True, False])
def test_enable_autolog_hparams_as_lightnings(tmp_path, autolog):
    import lightning.pytorch.loggers

    import trainmesh.loggers

    recorded = {}
    for name, loggers in (("lightning", lightning.pytorch.loggers), ("trainmesh", trainmesh.loggers)):
        calls: list = []
        logger = _logger_class(type("L", (), {"loggers": loggers}), calls, tmp_path / name)()
        _fit(name, tmp_path, logger=logger, enable_autolog_hparams=autolog)
        recorded[name] = calls
    assert recorded["trainmesh"] == recorded["lightning"]
    assert recorded["lightning"] == ([{"lr": 0.1}] if autolog else [])


def test_reload_dataloaders_every_n_epochs_checked_as_lightning():
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    theirs = _error("lightning", MisconfigurationException, reload_dataloaders_every_n_epochs=-1)
    assert _error("trainmesh", ValueError, reload_dataloaders_every_n_epochs=-1) == theirs


def test_model_registry_is_refused_with_the_reason():
    text = _error("trainmesh", ValueError, model_registry="my-model")
    assert "Lightning AI's cloud" in text and "trainer.save_checkpoint" in text


def _two_line_logger(L):
    class Net(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            loss = torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])
            self.log("a", loss)
            self.log("b", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Net()


def test_barebones_says_what_lightning_says_as_often(tmp_path, caplog):
    """Lightning's ``started running`` line, and its self.log warning once a process (from one place, so
    Python's default filter shows it once) however many lines log (l-progs17 p10: before, once per line
    calling self.log and no ``started running`` line); without a Trainer, Lightning's words."""
    import logging

    caplog.set_level(logging.INFO)
    said = {}
    for name, L in FRAMEWORKS.items():
        caplog.clear()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            L.Trainer(default_root_dir=tmp_path / name, max_epochs=2, barebones=True, **QUIET).fit(
                _two_line_logger(L), _loader()
            )
            _two_line_logger(L).training_step((torch.randn(2, 4), torch.randn(2, 1)), 0)
        lines = [r.getMessage() for r in caplog.records if "barebones" in r.getMessage()]
        said[name] = (lines, [str(w.message) for w in caught if "self.log()" in str(w.message)])
    assert said["trainmesh"] == said["lightning"]
    assert len(said["trainmesh"][1]) == 2 and any("started running" in line for line in said["trainmesh"][0])
