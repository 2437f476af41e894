"""Code from Lightning 2.6's own documentation pages (docs/source-pytorch: common/trainer.rst,
common/checkpointing_*.rst, common/early_stopping.rst, ...), each written as a small program of our
own, run under Lightning 2.6 and after the mechanical port under trainmesh, compared as data
(``helpers.programs``): what each raises, metrics.csv's rows, hparams.yaml's text, the trained
weights bit for bit."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import differences, outcome, run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def _data(n: int = 24) -> DataLoader:
    g = torch.Generator().manual_seed(3)
    return DataLoader(TensorDataset(torch.randn(n, 4, generator=g), torch.randn(n, 1, generator=g)), batch_size=8)


def _module(L):
    class Net(L.pl.LightningModule):
        def __init__(self, lr: float = 0.1, width: int = 4) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.layer = torch.nn.Linear(width, 1)

        def forward(self, x):
            return self.layer(x)

        def training_step(self, batch, batch_idx):
            loss = torch.nn.functional.mse_loss(self(batch[0]), batch[1])
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", torch.nn.functional.mse_loss(self(batch[0]), batch[1]))

        def test_step(self, batch, batch_idx):
            self.log("test_loss", torch.nn.functional.mse_loss(self(batch[0]), batch[1]))

        def predict_step(self, batch, batch_idx):
            return self(batch[0])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

    return Net


def _raised(call) -> tuple[str, str] | None:
    try:
        call()
    except Exception as error:  # the type's name and message are what is compared
        return type(error).__name__, str(error)
    return None


@pytest.mark.parametrize("stage", ["test", "predict", "overfit"])
def test_a_fraction_that_leaves_no_batch_is_refused_as_by_lightning(tmp_path, stage):
    """trainer.rst's ``limit_test_batches=0.25`` / ``limit_predict_batches=0.25`` /
    ``overfit_batches=0.25`` on a 3-batch loader: 0.25 * 3 < 1. Lightning refuses it with a
    MisconfigurationException naming the least fraction; trainmesh ran no batch at all, silently."""
    settings = {"test": {"limit_test_batches": 0.25}, "predict": {"limit_predict_batches": 0.25}}
    settings["overfit"] = {"overfit_batches": 0.25, "max_epochs": 1}

    def program(L, root):
        model = _module(L)()
        trainer = L.pl.Trainer(**trainer_kwargs(root, logger=False, **settings[stage]))
        if stage == "overfit":
            return _raised(lambda: trainer.fit(model, _data(48), _data()))
        return _raised(lambda: getattr(trainer, stage)(model, _data()))

    found = run_both(program, tmp_path)
    assert found["lightning"] is not None and found["lightning"][0] == "MisconfigurationException"
    assert found["trainmesh"] == found["lightning"]


def test_a_logger_called_without_a_step_and_the_hparams_file_as_lightning(tmp_path):
    """trainer.rst's ``for logger in trainer.loggers: logger.log_metrics({"foo": 1.0})`` (no step)
    and the hparams.yaml of ``save_hyperparameters()``: Lightning's CSVLogger takes step=None
    (the rows buffered so far) where trainmesh's raised TypeError, and with omegaconf installed
    Lightning writes the keys in their order (lr, width) where trainmesh sorted them."""

    def program(L, root):
        class Net(_module(L)):
            def training_step(self, batch, batch_idx):
                for logger in self.loggers:
                    logger.log_metrics({"foo": float(batch_idx)})
                return super().training_step(batch, batch_idx)

        model = Net(lr=0.05)
        logger = L.loggers.CSVLogger(root, name="logs", version=0)
        settings = dict(logger=logger, max_epochs=1, log_every_n_steps=1, enable_checkpointing=False)
        trainer = L.pl.Trainer(**trainer_kwargs(root, **settings))
        trainer.fit(model, _data())
        return outcome(trainer, model, root, hparams=(root / "logs" / "version_0" / "hparams.yaml").read_text())

    found = run_both(program, tmp_path)
    assert found["lightning"]["extra"]["hparams"] == "lr: 0.05\nwidth: 4\n"
    assert differences(found["lightning"], found["trainmesh"]) == []


def test_strict_loading_false_resumes_as_lightning(tmp_path):
    """checkpointing_intermediate.rst: a module whose ``state_dict`` leaves out its frozen encoder sets
    ``self.strict_loading = False``; ``trainer.fit(model, ckpt_path=...)`` loads with it. trainmesh
    loaded strictly and stopped with "Missing key(s) in state_dict"."""

    def program(L, root):
        class Partial(_module(L)):
            def __init__(self):
                super().__init__()
                self.encoder = torch.nn.Linear(4, 4).requires_grad_(False)
                self.strict_loading = False

            def state_dict(self, *args, **kwargs):
                return {k: v for k, v in super().state_dict(*args, **kwargs).items() if "encoder" not in k}

        first = L.pl.Trainer(**trainer_kwargs(root / "a", logger=False, max_epochs=1))
        first.fit(Partial(), _data())
        model = Partial()
        trainer = L.pl.Trainer(**trainer_kwargs(root / "b", logger=False, max_epochs=2))
        trainer.fit(model, _data(), ckpt_path=first.checkpoint_callback.best_model_path)
        return {"step": trainer.global_step, "weights": {k: v.clone() for k, v in model.state_dict().items()}}

    found = run_both(program, tmp_path)
    assert found["lightning"]["step"] == 6
    assert differences(found["lightning"], found["trainmesh"]) == []


def test_an_early_stopping_subclass_checking_at_train_end_as_lightning(tmp_path):
    """early_stopping.rst's ``MyEarlyStopping``: ``on_validation_end`` overridden to do nothing and
    ``self._run_early_stopping_check(trainer)`` called in ``on_train_end``; trainmesh had no such
    method (AttributeError at the end of fit)."""

    def program(L, root):
        class MyEarlyStopping(L.callbacks.EarlyStopping):
            def on_validation_end(self, trainer, pl_module):
                pass

            def on_train_end(self, trainer, pl_module):
                self._run_early_stopping_check(trainer)

        stopping = MyEarlyStopping(monitor="val_loss", patience=1, check_on_train_epoch_end=False)
        model = _module(L)(lr=2.0)  # diverges: the loss grows from the first epoch
        trainer = L.pl.Trainer(**trainer_kwargs(root, logger=False, max_epochs=3, callbacks=[stopping]))
        trainer.fit(model, _data(), _data())
        state = [stopping.wait_count, float(stopping.best_score), str(stopping.stopping_reason)]
        return {"state": state, "stopped": [stopping.stopped_epoch, trainer.should_stop, trainer.global_step]}

    found = run_both(program, tmp_path)
    assert differences(found["lightning"], found["trainmesh"]) == []


def test_a_plateau_scheduler_stepped_by_hand_in_manual_optimization_as_lightning(tmp_path):
    """manual_optimization.rst: ``configure_optimizers`` returns ``[optimizer], [ReduceLROnPlateau(...)]``
    with no ``monitor`` and ``on_train_epoch_end`` steps it with ``callback_metrics["loss"]``.
    Lightning takes it (in manual optimization the module steps its schedulers); trainmesh refused
    it before training, asking for a monitor."""

    def program(L, root):
        class Manual(_module(L)):
            def __init__(self):
                super().__init__()
                self.automatic_optimization = False
                self.lrs = []

            def training_step(self, batch, batch_idx):
                opt = self.optimizers()
                loss = torch.nn.functional.mse_loss(self(batch[0]), batch[1])
                opt.zero_grad()
                self.manual_backward(loss)
                opt.step()
                self.log("loss", loss)

            def configure_optimizers(self):
                optimizer = torch.optim.SGD(self.parameters(), lr=2.0)  # diverges: the plateau scheduler cuts
                return [optimizer], [torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.1, patience=0)]

            def on_train_epoch_end(self):
                scheduler = self.lr_schedulers()
                scheduler.step(self.trainer.callback_metrics["loss"])
                self.lrs.append(scheduler.optimizer.param_groups[0]["lr"])

        model = Manual()
        trainer = L.pl.Trainer(**trainer_kwargs(root, logger=False, enable_checkpointing=False, max_epochs=3))
        trainer.fit(model, _data())
        return {"lrs": model.lrs, "weights": {k: v.clone() for k, v in model.state_dict().items()}}

    found = run_both(program, tmp_path)
    assert len(found["lightning"]["lrs"]) == 3
    assert differences(found["lightning"], found["trainmesh"]) == []


def test_a_clip_value_given_twice_raises_lightning_s_exception_type(tmp_path):
    """optimization.rst's ``configure_gradient_clipping`` that doubles ``gradient_clip_val`` and calls
    ``self.clip_gradients`` with it, under ``Trainer(gradient_clip_val=...)``: Lightning itself
    refuses that with a MisconfigurationException; trainmesh raised a plain ValueError, which a
    program catching Lightning's type does not catch."""

    def program(L, root):
        exceptions = importlib.import_module(f"{L.pl.__name__}.utilities.exceptions")

        class Clipping(_module(L)):
            def configure_gradient_clipping(self, optimizer, gradient_clip_val, gradient_clip_algorithm):
                gradient_clip_val = gradient_clip_val * 2
                self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

        trainer = L.pl.Trainer(**trainer_kwargs(root, logger=False, max_epochs=1, gradient_clip_val=0.5))
        try:
            trainer.fit(Clipping(), _data())
        except exceptions.MisconfigurationException:
            return "MisconfigurationException"
        return None

    found = run_both(program, tmp_path)
    assert found == {"lightning": "MisconfigurationException", "trainmesh": "MisconfigurationException"}


def test_a_progress_bar_subclass_replaces_the_default_and_gets_lightning_s_metrics(tmp_path):
    """progress_bar.rst's ``class LitProgressBar(TQDMProgressBar)`` and Lightning's documented
    ``get_metrics`` override (``items = super().get_metrics(trainer, model); items.pop("v_num")``):
    trainmesh added its default bar beside the subclass (two bars in ``trainer.callbacks``) and had
    no ``get_metrics`` (AttributeError)."""

    def program(L, root):
        seen = []

        class LitProgressBar(L.callbacks.TQDMProgressBar):
            def get_metrics(self, trainer, model):
                items = super().get_metrics(trainer, model)
                seen.append(dict(items))
                items.pop("v_num", None)
                return items

            def on_train_epoch_end(self, trainer, pl_module):
                super().on_train_epoch_end(trainer, pl_module)
                seen.append(self.get_metrics(trainer, pl_module))

        class Net(_module(L)):
            def training_step(self, batch, batch_idx):
                loss = super().training_step(batch, batch_idx)
                self.log("bar_loss", loss, prog_bar=True)
                return loss

        logger = L.loggers.CSVLogger(root, name="logs", version=3)
        bar = LitProgressBar(refresh_rate=100)
        settings = dict(logger=logger, max_epochs=1, enable_checkpointing=False, callbacks=[bar])
        trainer = L.pl.Trainer(**{**trainer_kwargs(root, **settings), "enable_progress_bar": True})
        trainer.fit(Net(), _data())
        bars = [type(c).__name__ for c in trainer.callbacks if isinstance(c, L.callbacks.ProgressBar)]
        return {"bars": bars, "shown": seen[-2:]}

    found = run_both(program, tmp_path)
    assert found["lightning"]["bars"] == ["LitProgressBar"]
    assert found["lightning"]["shown"][0]["v_num"] == 3 and "v_num" not in found["lightning"]["shown"][1]
    assert differences(found["lightning"], found["trainmesh"]) == []


def test_a_data_module_s_state_is_saved_under_lightning_s_key(tmp_path):
    """datamodule.rst's ``state_dict`` / ``load_state_dict`` on a LightningDataModule: Lightning saves
    the state under the class's qualified name (``checkpoint[Data.__qualname__]``) and restores it from there, in
    ``trainer.validate(ckpt_path=...)`` and ``Data.load_from_checkpoint``; trainmesh saved it under
    ``"datamodule"``, so a checkpoint of either framework did not restore the other's state."""

    def program(L, root):
        restored = []

        class Data(L.pl.LightningDataModule):
            def train_dataloader(self):
                return _data()

            def val_dataloader(self):
                return _data(8)

            def state_dict(self):
                return {"seen": 5}

            def load_state_dict(self, state_dict):
                restored.append(dict(state_dict))

        trainer = L.pl.Trainer(**trainer_kwargs(root, logger=False, max_epochs=1))
        trainer.fit(_module(L)(), datamodule=Data())
        path = trainer.checkpoint_callback.best_model_path
        checkpoint = torch.load(path, weights_only=False)
        trainer.validate(_module(L)(), datamodule=Data(), ckpt_path=path, verbose=False)
        Data.load_from_checkpoint(path)
        saved = {k.split(".")[-1]: v for k, v in checkpoint.items() if k == Data.__qualname__ or k == "datamodule"}
        return {"saved": saved, "restored": restored}

    found = run_both(program, tmp_path)
    assert found["lightning"] == {"saved": {"Data": {"seen": 5}}, "restored": [{"seen": 5}, {"seen": 5}]}
    assert differences(found["lightning"], found["trainmesh"]) == []


def test_a_logger_of_one_s_own_from_the_logging_page_as_lightning(tmp_path):
    """logging.rst's ``MyLogger`` (``from lightning.pytorch.loggers.logger import Logger,
    rank_zero_experiment``; its methods under ``@rank_zero_only``): trainmesh had no
    ``loggers.logger`` module (ModuleNotFoundError). The calls it gets are Lightning's."""

    def program(L, root):
        logger_module = importlib.import_module(f"{L.pl.__name__}.loggers.logger")
        rank_zero_only = importlib.import_module(f"{L.pl.__name__}.utilities").rank_zero_only
        calls = []

        class MyLogger(logger_module.Logger):
            @property
            def name(self):
                return "MyLogger"

            @property
            def version(self):
                return "0.1"

            @property
            @logger_module.rank_zero_experiment
            def experiment(self):
                return "experiment"

            @rank_zero_only
            def log_hyperparams(self, params):
                calls.append(("log_hyperparams", dict(params)))

            @rank_zero_only
            def log_metrics(self, metrics, step):
                calls.append(("log_metrics", step, sorted(metrics)))

            @rank_zero_only
            def save(self):
                calls.append("save")

            @rank_zero_only
            def finalize(self, status):
                calls.append(("finalize", status))

        logger = MyLogger()
        settings = dict(logger=logger, max_epochs=2, log_every_n_steps=2, enable_checkpointing=False)
        trainer = L.pl.Trainer(**trainer_kwargs(root, **settings))
        trainer.fit(_module(L)(), _data(), _data(8))
        return {"calls": calls, "experiment": logger.experiment}

    found = run_both(program, tmp_path)
    assert ("finalize", "success") in found["lightning"]["calls"]
    assert differences(found["lightning"], found["trainmesh"]) == []


def test_a_resumed_fit_writes_into_its_own_logger_s_folder_as_lightning(tmp_path):
    """checkpointing_basic.rst: checkpoints go to the logger's ``.../version_N/checkpoints``. A fit
    resumed (``ckpt_path=``) from a checkpoint written by a fit without a logger
    (``<root>/checkpoints``) writes into its own logger's folder and leaves the first run's file,
    as Lightning; trainmesh went back to the checkpoint's folder and deleted the first run's file."""

    def program(L, root):
        first = L.pl.Trainer(**trainer_kwargs(root, logger=False, max_epochs=1))
        first.fit(_module(L)(), _data())
        logger = L.loggers.CSVLogger(root, name="logs", version=0)
        second = L.pl.Trainer(**trainer_kwargs(root, logger=logger, max_epochs=2))
        second.fit(_module(L)(), _data(), ckpt_path=first.checkpoint_callback.best_model_path)
        files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.ckpt"))
        return {"files": files, "best": Path(second.checkpoint_callback.best_model_path).relative_to(root).as_posix()}

    found = run_both(program, tmp_path)
    assert found["lightning"]["files"] == [
        "checkpoints/epoch=0-step=3.ckpt",
        "logs/version_0/checkpoints/epoch=1-step=6.ckpt",
    ]
    assert differences(found["lightning"], found["trainmesh"]) == []
