"""A trainmesh checkpoint read as Lightning 2.6.6 writes one: the same program trains under Lightning and
trainmesh, and the checkpoints' Lightning keys (``pytorch-lightning_version``, ``loops``, the precision
plugin's ``MixedPrecision`` entry), their order, and Lightning's own ``fit(ckpt_path=)`` from each are compared."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

L = pytest.importorskip("lightning.pytorch")
import trainmesh as tm  # noqa: E402

_G = torch.Generator().manual_seed(0)
X = torch.randn(16, 4, generator=_G)
Y = X @ torch.randn(4, 1, generator=_G)


def _model_class(framework):
    class Model(framework.LightningModule):
        def __init__(self, hidden: int = 3) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1]))

        def predict_step(self, batch, batch_idx):
            return self.layer(batch[0])

        def val_dataloader(self):
            return DataLoader(TensorDataset(X, Y), batch_size=8)

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, 1, 0.5)]

        def train_dataloader(self):
            return DataLoader(TensorDataset(X, Y), batch_size=8)

    return Model


def _fit(framework, root, *, max_epochs=1, ckpt_path=None, plugins=None):
    framework.seed_everything(0)
    model = _model_class(framework)()
    trainer = framework.Trainer(
        max_epochs=max_epochs,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        devices=1,
        default_root_dir=str(root),
        callbacks=[framework.callbacks.ModelCheckpoint(dirpath=str(root), filename="epoch_end")],
        plugins=plugins,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(model, ckpt_path=ckpt_path)
    trainer.save_checkpoint(root / "after_fit.ckpt")
    trainer.save_checkpoint(root / "weights.ckpt", weights_only=True)
    return trainer, model


def _load(path):
    return torch.load(path, weights_only=False)


def test_lightning_keys_in_lightnings_order(tmp_path):
    runs = {"pl": _fit(L, tmp_path / "pl"), "tm": _fit(tm, tmp_path / "tm")}
    for folder, (trainer, model) in runs.items():  # then a validate run: Lightning counts its batches too
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.validate(model, verbose=False)
            trainer.predict(model, DataLoader(TensorDataset(X), batch_size=4))
        trainer.save_checkpoint(tmp_path / folder / "after_validate.ckpt")
    ours, theirs = _load(tmp_path / "tm" / "after_validate.ckpt"), _load(tmp_path / "pl" / "after_validate.ckpt")
    assert theirs["loops"]["validate_loop"]["batch_progress"]["total"]["completed"] == 2
    assert theirs["loops"]["predict_loop"]["batch_progress"]["total"]["completed"] == 4
    for loop in ("validate_loop", "predict_loop"):  # trainmesh wrote zeros
        assert ours["loops"][loop] == theirs["loops"][loop]
    for name in ("epoch_end.ckpt", "after_fit.ckpt"):
        ours, theirs = _load(tmp_path / "tm" / name), _load(tmp_path / "pl" / name)
        assert ours["pytorch-lightning_version"] == theirs["pytorch-lightning_version"] == "2.6.6"
        assert [key for key in ours if key in theirs] == list(theirs)  # every key of Lightning's, in its order
        assert (ours["epoch"], ours["global_step"]) == (theirs["epoch"], theirs["global_step"])
        assert list(ours["callbacks"]) == list(theirs["callbacks"])
        for key, state in theirs["callbacks"].items():  # Lightning's state keys first, in its order
            assert list(ours["callbacks"][key])[: len(state)] == list(state)
        fit_loop, expected = ours["loops"]["fit_loop"], theirs["loops"]["fit_loop"]
        assert ours["loops"].keys() == theirs["loops"].keys()
        assert fit_loop.keys() == expected.keys()
        assert fit_loop["epoch_progress"] == expected["epoch_progress"]
        assert fit_loop["epoch_loop.state_dict"] == expected["epoch_loop.state_dict"]
        # the fit's validation and scheduler steps counted (trainmesh wrote zeros)
        assert fit_loop["epoch_loop.val_loop.batch_progress"] == expected["epoch_loop.val_loop.batch_progress"]
        assert fit_loop["epoch_loop.scheduler_progress"] == expected["epoch_loop.scheduler_progress"], name
        steps = "epoch_loop.automatic_optimization.optim_progress"
        assert fit_loop[steps]["optimizer"]["step"]["total"] == expected[steps]["optimizer"]["step"]["total"]
    ours, theirs = _load(tmp_path / "tm" / "weights.ckpt"), _load(tmp_path / "pl" / "weights.ckpt")
    assert [key for key in ours if key in theirs] == list(theirs)
    assert ours["loops"]["fit_loop"]["epoch_progress"] == theirs["loops"]["fit_loop"]["epoch_progress"]


def test_lightning_resumes_from_a_trainmesh_checkpoint(tmp_path):
    """Lightning's fit(ckpt_path=) from trainmesh's checkpoint continues as from its own (before, it stopped at
    ``KeyError: 'pytorch-lightning_version'``; without ``loops`` it would retrain from epoch 0)."""
    _fit(L, tmp_path / "pl")
    _fit(tm, tmp_path / "tm")
    for name in ("epoch_end.ckpt", "after_fit.ckpt"):
        outcomes = {}
        for source in ("pl", "tm"):
            trainer, model = _fit(L, tmp_path / f"resume_{source}", max_epochs=2, ckpt_path=tmp_path / source / name)
            outcomes[source] = (trainer.current_epoch, trainer.global_step, model.layer.weight.detach().clone())
        assert outcomes["tm"][:2] == outcomes["pl"][:2] == (2, 4)
        torch.testing.assert_close(outcomes["tm"][2], outcomes["pl"][2], rtol=0, atol=0)
        loaded = _model_class(L).load_from_checkpoint(tmp_path / "tm" / name)
        torch.testing.assert_close(loaded.layer.weight, _load(tmp_path / "tm" / name)["state_dict"]["layer.weight"])


def test_scaler_state_under_lightnings_plugin_key(tmp_path):
    _fit(L, tmp_path / "pl", plugins=[L.plugins.MixedPrecision("16-mixed", "cpu")])
    _fit(tm, tmp_path / "tm", plugins=[tm.plugins.MixedPrecision("16-mixed", "cpu")])
    ours, theirs = _load(tmp_path / "tm" / "after_fit.ckpt"), _load(tmp_path / "pl" / "after_fit.ckpt")
    assert ours["MixedPrecision"] == theirs["MixedPrecision"]
    assert "precision" not in ours


def test_scaler_state_read_from_either_key(tmp_path):
    """A checkpoint whose scaler state says scale=4.0 resumes with that scale, under Lightning's key and
    under the ``precision`` entry older trainmesh checkpoints hold."""
    _fit(tm, tmp_path / "tm", plugins=[tm.plugins.MixedPrecision("16-mixed", "cpu")])
    checkpoint = _load(tmp_path / "tm" / "after_fit.ckpt")
    scaler = dict(checkpoint.pop("MixedPrecision"), scale=4.0, growth_interval=10**6)
    layouts = {
        "lightning": {**checkpoint, "MixedPrecision": scaler},
        "old": {**checkpoint, "precision": {"scaler": scaler}},
    }
    for name, layout in layouts.items():
        torch.save(layout, tmp_path / f"{name}.ckpt")
        trainer, _ = _fit(
            tm,
            tmp_path / f"resume_{name}",
            max_epochs=2,
            ckpt_path=tmp_path / f"{name}.ckpt",
            plugins=[tm.plugins.MixedPrecision("16-mixed", "cpu")],
        )
        assert _load(tmp_path / f"resume_{name}" / "after_fit.ckpt")["MixedPrecision"]["scale"] == 4.0, name


def test_validate_and_fit_from_a_lightning_checkpoint(tmp_path):
    """validate(ckpt_path=) on a file Lightning wrote loads its weights and ModelCheckpoint state as Lightning
    does (before, trainmesh refused the file); fit(ckpt_path=) resumes from it as Lightning's own resume does
    (before, refused: trainer/lightning_resume.py; each save point: tests/trainer/test_restart_counts_lightning.py)."""
    _fit(L, tmp_path / "pl")
    source = tmp_path / "pl" / "epoch_end.ckpt"
    outcomes = {}
    for framework in (L, tm):
        callback = framework.callbacks.ModelCheckpoint(dirpath=str(tmp_path / "pl"))
        trainer = framework.Trainer(
            logger=False, enable_progress_bar=False, enable_model_summary=False, callbacks=[callback]
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            metrics = trainer.validate(_model_class(framework)(), ckpt_path=source, verbose=False)
        outcomes[framework.__name__] = (metrics, callback.best_model_path)
    assert outcomes["trainmesh"] == outcomes[L.__name__]
    runs = (("pl", L), ("tm", tm))
    resumed = {name: _fit(framework, tmp_path / name, max_epochs=2, ckpt_path=source) for name, framework in runs}
    assert resumed["tm"][0].global_step == resumed["pl"][0].global_step == 4
    assert torch.equal(resumed["tm"][1].layer.weight, resumed["pl"][1].layer.weight)
