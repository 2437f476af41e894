"""``validate/test/predict(ckpt_path="best")`` where no best checkpoint can be named stops with Lightning 2.6's
``ValueError`` and words: no ModelCheckpoint configured, one that saved no best model, ``fast_dev_run``
(trainmesh's how-to-fix may follow). Before, each said "ckpt_path='best': no best checkpoint is known for
this trainer" (Lightning's own trainer/test_trainer.py::test_checkpoint_path_input and
test_tested_checkpoint_path_best match its words)."""

import importlib
import warnings

import pytest
import torch
from torch.utils.data import DataLoader

pl = pytest.importorskip("lightning.pytorch")
FRAMEWORKS = {"lightning": pl, "trainmesh": importlib.import_module("trainmesh")}
SETTINGS = {
    "default": {},
    "no_checkpointing": {"enable_checkpointing": False},
    "saves_none": {"callbacks": "save_top_k=0"},
    "fast_dev_run": {"fast_dev_run": True},
}


def _error(name, setting, stage):
    framework = FRAMEWORKS[name]
    arguments = dict(SETTINGS[setting])
    if arguments.get("callbacks"):
        arguments["callbacks"] = [framework.callbacks.ModelCheckpoint(save_top_k=0)]

    class Net(framework.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def forward(self, x):
            return self.layer(x)

        def validation_step(self, batch, batch_idx):
            return self.layer(batch).sum()

        test_step = validation_step

    trainer = framework.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, **arguments)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            getattr(trainer, stage)(Net(), DataLoader(torch.randn(2, 2)), ckpt_path="best")
        except ValueError as error:
            return str(error)
    raise AssertionError(f"{name}: {stage}(ckpt_path='best') ran")


@pytest.mark.parametrize("setting", sorted(SETTINGS))
@pytest.mark.parametrize("stage", ["validate", "test", "predict"])
def test_best_refused_in_lightning_s_words(setting, stage):
    lightning = _error("lightning", setting, stage)
    assert _error("trainmesh", setting, stage).startswith(lightning)


def _multiple_warning(name, tmp_path):
    framework = FRAMEWORKS[name]
    checkpoints = [  # distinct state keys (every_n_epochs): Lightning refuses two checkpoints with the same one
        framework.callbacks.ModelCheckpoint(dirpath=tmp_path / name / str(n), every_n_epochs=n) for n in (1, 2)
    ]
    demo = importlib.import_module(f"{framework.__name__}.demos.boring_classes")
    trainer = framework.Trainer(
        accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False, callbacks=checkpoints,
        max_epochs=1, limit_train_batches=1, limit_val_batches=1, limit_test_batches=1,
    )  # fmt: skip
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        trainer.fit(demo.BoringModel())
        trainer.test(ckpt_path="best")
    return [str(w.message) for w in seen if "multiple `ModelCheckpoint`" in str(w.message)]


def test_best_with_several_checkpoint_callbacks_warns_as_lightning(tmp_path):
    lightning = _multiple_warning("lightning", tmp_path)
    assert len(lightning) == 1
    assert _multiple_warning("trainmesh", tmp_path) == lightning
