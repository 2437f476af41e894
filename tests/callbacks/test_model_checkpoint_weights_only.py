"""ModelCheckpoint(save_weights_only=True) and the other Lightning arguments and attributes,
in a real (small, in-process) fit."""

import pytest
import torch
from torch.utils.data import DataLoader

from helpers.models import DropoutNet, quiet_trainer, random_classification
from trainmesh.callbacks import ModelCheckpoint


def _loaders():
    return (
        DataLoader(random_classification(), batch_size=8, shuffle=True),
        DataLoader(random_classification(40, seed=1), batch_size=8),
    )


def test_weights_only_checkpoints_load_for_evaluation_and_refuse_resume(tmp_path):
    torch.manual_seed(0)
    best = ModelCheckpoint(
        dirpath=tmp_path / "best",
        monitor="val_loss",
        save_top_k=2,
        save_last=True,
        save_weights_only=True,
        filename="{epoch}-{val_loss:.3f}",
        save_on_train_epoch_end=None,
    )
    # A foreign file with the name the second callback uses: without the version counter it is overwritten.
    (tmp_path / "fixed").mkdir()
    (tmp_path / "fixed" / "latest.ckpt").write_text("not a checkpoint")
    latest = ModelCheckpoint(
        dirpath=tmp_path / "fixed", filename="latest", enable_version_counter=False, auto_insert_metric_name=False
    )
    trainer = quiet_trainer(max_epochs=3, limit_train_batches=3, enable_checkpointing=True, callbacks=[best, latest])
    model = DropoutNet()
    trainer.fit(model, *_loaders())

    # Lightning's attributes: a tensor score, the ranking as path -> score, the last file.
    assert len(best.best_k_models) == 2 and best.best_model_path in best.best_k_models
    assert isinstance(best.best_model_score, torch.Tensor)
    assert best.best_model_score.item() == min(best.best_k_models.values()) == best.best_k_models[best.best_model_path]
    assert best.last_model_path == str(tmp_path / "best" / "last.ckpt")
    assert sorted(p.name for p in (tmp_path / "fixed").iterdir()) == ["latest.ckpt"]  # overwritten, no -v1

    # last.ckpt holds the weights and the hyperparameters, and nothing to resume with. As Lightning 2.6's,
    # it is written beside a top-k save only: the weights of the newest top-k checkpoint.
    saved = torch.load(best.last_model_path, weights_only=False)
    assert not {"callbacks", "loop", "lr_schedulers", "per_rank", "optimizer_states"} & set(saved)  # as 2.6 and 1.9.5
    newest = max((torch.load(p, weights_only=False) for p in best.best_k_models), key=lambda c: c["global_step"])
    assert saved["global_step"] == newest["global_step"]
    trained = newest["state_dict"]
    assert all(torch.equal(saved["state_dict"][k], trained[k]) for k in trained)
    assert saved["hyper_parameters"]["lr"] == 0.05

    # Loading it for evaluation, or building the module from it, gives the trained weights.
    fresh = DropoutNet()
    quiet_trainer().validate(fresh, _loaders()[1], ckpt_path=best.last_model_path, verbose=False)
    rebuilt = DropoutNet.load_from_checkpoint(best.last_model_path)
    for other in (fresh, rebuilt):
        assert all(torch.equal(other.state_dict()[k], trained[k]) for k in trained)
    # Resuming fit from it is refused, saying why and what to do instead.
    with pytest.raises(ValueError, match=r"only the model's weights.*save_weights_only=False"):
        quiet_trainer(max_epochs=4).fit(DropoutNet(), *_loaders(), ckpt_path=best.best_model_path)
