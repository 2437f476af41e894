"""Lightning 2.6's ``weights_only`` on ``Trainer.fit/validate/test/predict`` and
``load_from_checkpoint``: passed to ``torch.load`` (None: torch's default, True since torch 2.6).
The same program runs under Lightning 2.6.6 and trainmesh: a module whose hyperparameters hold an
object of the program's own class, saved, then loaded each way; each call's outcome (torch's
``UnpicklingError``, or the loaded weights and the validation loss) is compared."""

from __future__ import annotations

import dataclasses
import pickle

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

L = pytest.importorskip("lightning.pytorch")
import trainmesh as tm  # noqa: E402


@dataclasses.dataclass
class Scale:  # a class of the program's own: outside torch's weights_only allowlist
    factor: float = 2.0


def _model_class(framework):
    class Model(framework.LightningModule):
        def __init__(self, scale: Scale | None = None, hidden: int = 3) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))

        def predict_step(self, batch, batch_idx):
            return self.layer(batch[0])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Model


def _loader() -> DataLoader:
    torch.manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)


def _trainer(framework, root, **kwargs):
    options = dict(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False)
    options.update(max_epochs=1, enable_model_summary=False, default_root_dir=root)
    return framework.Trainer(**{**options, **kwargs})


def _outcome(call):
    try:
        value = call()
    except pickle.UnpicklingError as exc:
        return ("UnpicklingError", "Weights only load failed" in str(exc))
    if isinstance(value, torch.nn.Module):
        return ("module", [p.detach().clone() for p in value.parameters()])
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return ("metrics", {k: round(float(v), 6) for k, v in value[0].items()})
    return ("value", value)


def _run(framework, tmp_path, *, own_class: bool):
    Model = _model_class(framework)
    torch.manual_seed(0)
    model = Model(scale=Scale(3.0) if own_class else None)
    trainer = _trainer(framework, tmp_path)
    trainer.fit(model, _loader())
    path = str(tmp_path / "model.ckpt")
    trainer.save_checkpoint(path)
    found = {}
    for weights_only in (None, True, False):
        found[f"load_from_checkpoint({weights_only})"] = _outcome(
            lambda w=weights_only: Model.load_from_checkpoint(path, weights_only=w)
        )
        found[f"validate({weights_only})"] = _outcome(
            lambda w=weights_only: _trainer(framework, tmp_path).validate(
                Model(), _loader(), ckpt_path=path, verbose=False, weights_only=w
            )
        )
        found[f"predict({weights_only})"] = _outcome(
            lambda w=weights_only: [
                {
                    "sum": torch.cat(
                        _trainer(framework, tmp_path).predict(Model(), _loader(), ckpt_path=path, weights_only=w)
                    ).sum()
                }
            ]
        )
        resumed = _trainer(framework, tmp_path, max_epochs=2)
        found[f"fit({weights_only})"] = _outcome(
            lambda w=weights_only, t=resumed: (
                t.fit(Model(), _loader(), ckpt_path=path, weights_only=w),
                t.global_step,
            )[1]
        )
    return found


@pytest.mark.parametrize("own_class", [True, False], ids=["own-class-in-hparams", "plain"])
def test_weights_only_loads_and_refuses_as_lightning(tmp_path, own_class: bool) -> None:
    theirs = _run(L, tmp_path / "lightning", own_class=own_class)
    ours = _run(tm, tmp_path / "trainmesh", own_class=own_class)
    assert theirs.keys() == ours.keys()
    for key in theirs:
        kind, value = theirs[key]
        assert ours[key][0] == kind, (key, theirs[key], ours[key])
        if kind == "module":
            for a, b in zip(value, ours[key][1], strict=True):
                torch.testing.assert_close(a, b, rtol=0, atol=0)
        else:
            assert ours[key][1] == value, key
    refused = {key for key, (kind, _) in theirs.items() if kind == "UnpicklingError"}
    # The program's own class stops every load but weights_only=False's; a plain checkpoint loads.
    assert refused == (
        {f"{c}({w})" for c in ("load_from_checkpoint", "validate", "predict", "fit") for w in (None, True)}
        if own_class
        else set()
    )


def test_an_allowed_global_loads_under_weights_only(tmp_path) -> None:
    Model = _model_class(tm)
    trainer = _trainer(tm, tmp_path)
    trainer.fit(Model(scale=Scale(3.0)), _loader())
    path = str(tmp_path / "model.ckpt")
    trainer.save_checkpoint(path)
    with torch.serialization.safe_globals([Scale]):  # torch's own allowlist, as under Lightning
        assert Model.load_from_checkpoint(path, weights_only=True).hparams.scale == Scale(3.0)
        assert _trainer(tm, tmp_path).validate(Model(), _loader(), ckpt_path=path, weights_only=True, verbose=False)
