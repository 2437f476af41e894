"""Lightning 2.6's ``ModelCheckpoint(every_n_train_steps=...)`` under manual optimization, run under
Lightning 2.6.6 and trainmesh on the same program: Lightning warns that the checkpoint holds the
weights after the step; and where the module follows that warning's advice (``self.saved_models``,
a dict of ``layer``'s state before each step), the checkpoint holds ``layer``'s weights before the
step (the module's own ``layer`` is put back after the save). Compared: the files written, each
checkpoint's weights, the module's weights after fit, and the warning."""

from __future__ import annotations

import os
import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

L = pytest.importorskip("lightning.pytorch")
import trainmesh as tm  # noqa: E402


def _model_class(framework, keep_states: bool):
    class Model(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            opt = self.optimizers()
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.layer(x), y)
            if keep_states:  # Lightning's warning's example, as written there
                if not hasattr(self, "saved_models"):
                    self.saved_models = {}
                self.saved_models[batch_idx] = {k: v.detach().clone() for k, v in self.layer.state_dict().items()}
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Model


def _fit(framework, root, keep_states):
    torch.manual_seed(0)
    model = _model_class(framework, keep_states)()
    data = TensorDataset(torch.randn(12, 4), torch.randn(12, 1))
    checkpoint = framework.callbacks.ModelCheckpoint(dirpath=root, every_n_train_steps=2, save_top_k=-1)
    trainer = framework.Trainer(
        max_epochs=2, logger=False, enable_progress_bar=False, enable_model_summary=False, callbacks=[checkpoint]
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model, DataLoader(data, batch_size=2))
    told = sum("pre-optimization state was saved" in str(w.message) for w in caught)
    saved = {
        name: torch.load(os.path.join(root, name), weights_only=False)["state_dict"]
        for name in sorted(os.listdir(root))
    }
    return told, saved, {k: v.clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("keep_states", [False, True])
def test_manual_optimization_step_checkpoints_are_lightnings(tmp_path, keep_states):
    told, saved, after = _fit(L, str(tmp_path / "pl"), keep_states)
    our_told, ours, our_after = _fit(tm, str(tmp_path / "tm"), keep_states)
    assert sorted(ours) == sorted(saved)
    for name in saved:
        for key in saved[name]:
            assert torch.equal(ours[name][key], saved[name][key]), (name, key)
    for key in after:
        assert torch.equal(our_after[key], after[key]), key
    assert (our_told > 0) == (told > 0)
    assert (told > 0) == (not keep_states)


class _Validated:
    """A manual-optimization module with a validation metric, for the monitored step saves."""

    @staticmethod
    def make(framework):
        class Model(_model_class(framework, keep_states=False)):
            def validation_step(self, batch, batch_idx):
                x, y = batch
                self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))

        return Model


def _fit_monitored(framework, root, save_on_train_epoch_end):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(12, 4), torch.randn(12, 1))
    checkpoint = framework.callbacks.ModelCheckpoint(
        dirpath=root,
        every_n_train_steps=2,
        save_top_k=-1,
        monitor="val_loss",
        save_on_train_epoch_end=save_on_train_epoch_end,
    )
    trainer = framework.Trainer(
        max_epochs=3,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[checkpoint],
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(_Validated.make(framework)(), DataLoader(data, batch_size=2), DataLoader(data, batch_size=4))
    missing = sum("val_loss" in str(w.message) for w in caught)
    return sorted(os.listdir(root)), missing


@pytest.mark.parametrize("save_on_train_epoch_end", [None, False])
def test_a_monitored_step_save_before_any_validation_waits_as_lightnings(tmp_path, save_on_train_epoch_end):
    """Lightning 2.6 defers a manual-optimization step save whose monitored metric does not exist yet
    to the next validation's end (written there when checkpoints are taken after validation, dropped
    when they are taken at the epoch's end), without a warning; trainmesh warned and wrote nothing."""
    theirs = _fit_monitored(L, str(tmp_path / "pl"), save_on_train_epoch_end)
    ours = _fit_monitored(tm, str(tmp_path / "tm"), save_on_train_epoch_end)
    assert ours == theirs
