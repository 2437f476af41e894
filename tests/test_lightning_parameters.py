"""The parameters tests/test_lightning_signatures.py found missing or out of Lightning's order, now
taken as Lightning 2.6 takes them: each program runs under Lightning and trainmesh and what it
records is compared (the hooks a callback's ``super()`` call with ``pl_module=`` reaches,
LambdaCallback's hooks by name and position, ``log_dict``'s options, ``save_hyperparameters(frame=)``,
``save_checkpoint(filepath=)`` and its ``storage_options`` refusal, positional ``load_from_checkpoint``,
``validate``/``test`` and callback arguments)."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

L = pytest.importorskip("lightning.pytorch")
import trainmesh as tm  # noqa: E402


def _trainer(framework, **kwargs):
    options = dict(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False)
    return framework.Trainer(max_epochs=1, enable_model_summary=False, **{**options, **kwargs})


def _model_class(framework):
    class Model(framework.LightningModule):
        def __init__(self, hidden: int = 3, lr: float = 0.1) -> None:
            super().__init__()
            _save_from_a_helper(self)
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.layer(x), y)
            self.log_dict(dictionary={"a": loss, "b": 2 * loss}, prog_bar=True, on_step=False, on_epoch=True)
            return loss

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log_dict({"val": torch.nn.functional.mse_loss(self.layer(x), y)}, False, None, None, True)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Model


def _save_from_a_helper(module) -> None:
    # Lightning's frame=: a helper of __init__ names the __init__'s frame.
    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    module.save_hyperparameters(ignore="lr", frame=frame.f_back)


def _loader() -> DataLoader:
    torch.manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)


def _calls_class(framework, calls: list):
    class Recorder(framework.Callback):
        def on_train_start(self, trainer, pl_module):
            calls.append(("on_train_start", type(pl_module).__name__))
            super().on_train_start(trainer, pl_module=pl_module)  # Lightning's parameter name

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            super().on_train_batch_end(trainer, pl_module=pl_module, outputs=outputs, batch=batch, batch_idx=batch_idx)
            calls.append(("on_train_batch_end", batch_idx))

    return Recorder


def _run(framework, tmp_path):
    calls: list = []
    hooks = framework.callbacks.LambdaCallback(
        lambda trainer, pl_module, stage: calls.append(("setup", stage)),  # setup, by position
        on_fit_end=lambda trainer, pl_module: calls.append(("on_fit_end",)),
        on_validation_epoch_end=lambda trainer, pl_module: calls.append(("val_end", trainer.current_epoch)),
    )
    torch.manual_seed(0)
    model = _model_class(framework)(hidden=5, lr=0.5)
    trainer = _trainer(framework, callbacks=[_calls_class(framework, calls)(), hooks])
    trainer.fit(model, _loader(), _loader())
    metrics = {k: round(float(v), 6) for k, v in trainer.callback_metrics.items()}
    path = str(tmp_path / f"{framework.__name__}.ckpt")
    trainer.save_checkpoint(filepath=path)
    with pytest.raises(TypeError, match="storage_options"):
        trainer.save_checkpoint(path, False, {"bucket": "x"})
    loaded = type(model).load_from_checkpoint(path, "cpu")  # map_location by position
    validated = trainer.validate(model, _loader(), None, False)  # ckpt_path, verbose by position
    return calls, metrics, dict(model.hparams), dict(loaded.hparams), validated, sorted(trainer.progress_bar_metrics)


def test_callbacks_log_dict_hparams_and_checkpoints_take_lightning_s_arguments(tmp_path) -> None:
    expected = _run(L, tmp_path)
    got = _run(tm, tmp_path)
    assert got[0] == expected[0]  # the hooks reached, in order, with super(...pl_module=) calls
    assert got[1] == expected[1]  # log_dict's metrics and values
    assert got[2] == expected[2] == {"hidden": 5}  # save_hyperparameters(frame=, ignore=)
    assert got[3] == expected[3]
    assert [{k: round(v, 6) for k, v in r.items()} for r in got[4]] == [
        {k: round(v, 6) for k, v in r.items()} for r in expected[4]
    ]
    assert got[5] == expected[5]  # prog_bar=True reaches the progress bar's metrics


def _positional_settings(framework) -> list:
    stop = framework.callbacks.EarlyStopping("val", 0.1, 2, True, "max")
    save = framework.callbacks.ModelCheckpoint("d", "f", "val", True, True, 3)
    return [
        (stop.monitor, stop.min_delta, stop.patience, stop.verbose, stop.mode),
        (save.filename, save.monitor, save.verbose, save.save_last, save.save_top_k),
    ]


def test_callback_arguments_passed_by_position_mean_what_they_mean_in_lightning() -> None:
    got, expected = _positional_settings(tm), _positional_settings(L)
    assert got[0][1:] == expected[0][1:] == (0.1, 2, True, "max")  # Lightning negates min_delta under max
    assert got[1] == expected[1]
    tqdm, rich = tm.callbacks.TQDMProgressBar(7, 0, False), tm.callbacks.RichProgressBar(5, False)
    lightning_tqdm, lightning_rich = L.callbacks.TQDMProgressBar(7, 0, False), L.callbacks.RichProgressBar(5, False)
    assert (tqdm.refresh_rate, tqdm.process_position, tqdm.leave) == (7, 0, lightning_tqdm._leave)
    assert (rich.refresh_rate, rich.leave) == (lightning_rich.refresh_rate, lightning_rich._leave)
    # A bar under Lightning's name replaces the default one: the run draws one bar.
    bars = [cb for cb in tm.Trainer(callbacks=[tqdm]).callbacks if isinstance(cb, tm.callbacks.ProgressBar)]
    assert bars == [tqdm]


def test_rank_zero_warn_takes_stacklevel_second_as_lightning() -> None:
    from lightning.pytorch.utilities import rank_zero_warn as lightning_warn

    from trainmesh.utilities import rank_zero_warn

    for warn in (lightning_warn, rank_zero_warn):
        with pytest.warns(UserWarning, match="careful"):
            warn("careful", 2)


def test_wandb_logger_takes_add_file_policy_as_lightning(tmp_path) -> None:
    pytest.importorskip("wandb")
    for framework in (L, tm):
        logger = framework.loggers.WandbLogger(save_dir=str(tmp_path), offline=True, add_file_policy="immutable")
        assert logger.add_file_policy == "immutable"  # used only by log_model's upload (refused in trainmesh)
    with pytest.raises(ValueError, match="log_model"):
        tm.loggers.WandbLogger(save_dir=str(tmp_path), log_model=True, add_file_policy="immutable")
