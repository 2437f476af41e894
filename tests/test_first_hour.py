"""What a new user meets in the first hour: mistakes named in one sentence, before anything runs.

Each test compares with Lightning 2.6 where Lightning defines the behaviour (the same program,
run under both), so that the message is trainmesh's own but the moment and the kind are the owner's.
"""

from __future__ import annotations

import ast
import inspect
import pathlib
import re
import warnings

import pytest
import tomllib
import torch
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from trainmesh.utilities.exceptions import MisconfigurationException
from trainmesh.utilities.install_hints import EXTRAS, install_hint
from trainmesh.utilities.warnings import PossibleUserWarning

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _loader(n: int = 16) -> DataLoader:
    generator = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(n, 4, generator=generator), torch.randn(n, 1)), batch_size=4)


class _Recorder(tm.Callback):
    def __init__(self) -> None:
        self.calls: list[str] = []

    def setup(self, trainer, module, stage):
        self.calls.append("setup")

    def on_fit_start(self, trainer, module):
        self.calls.append("on_fit_start")


class _NoTrainingStep(tm.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class _Regressor(_NoTrainingStep):
    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss)
        return loss


def _trainer(**kwargs) -> tm.Trainer:
    settings = dict(max_epochs=1, enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False)
    return tm.Trainer(**{**settings, **kwargs})


def test_a_module_without_training_step_is_refused_before_any_hook(tmp_path):
    recorder = _Recorder()
    with pytest.raises(MisconfigurationException) as caught:
        _trainer(callbacks=[recorder], logger=False, default_root_dir=tmp_path).fit(_NoTrainingStep(), _loader())
    message = str(caught.value)
    assert "\n" not in message  # one sentence, not a traceback from the first batch
    assert message.startswith("_NoTrainingStep defines no training_step(), so trainer.fit() cannot run")
    assert recorder.calls == []  # nothing ran: no setup, no on_fit_start


@pytest.mark.parametrize(("stage", "step"), [("validate", "validation_step"), ("test", "test_step")])
def test_an_evaluation_without_its_step_is_refused(stage, step):
    # Without the check, the base class's empty step ran every batch and returned no metrics.
    with pytest.raises(MisconfigurationException, match=rf"_Regressor defines no {step}\(\), so trainer.{stage}\(\)"):
        getattr(_trainer(logger=False), stage)(_Regressor(), _loader())


def test_lightning_refuses_the_same_modules():
    lightning = pytest.importorskip("lightning.pytorch")

    class NoStep(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    owner = lightning.Trainer(max_epochs=1, logger=False, enable_progress_bar=False, enable_checkpointing=False)
    with pytest.raises(Exception, match="No `training_step\\(\\)` method defined") as caught:
        owner.fit(NoStep(), _loader())
    assert type(caught.value).__name__ == MisconfigurationException.__name__
    with pytest.raises(Exception, match="No `test_step\\(\\)` method defined"):
        owner.test(NoStep(), _loader())


@pytest.mark.parametrize(
    ("settings", "kind", "suggestion"),
    [
        ({"max_epoch": 5}, TypeError, "max_epochs"),
        ({"limit_train_batch": 2}, TypeError, "limit_train_batches"),
        ({"strategy": "dpp"}, ValueError, "ddp"),
        ({"precision": "16-mix"}, ValueError, "16-mixed"),
        ({"accelerator": "cpus"}, ValueError, "cpu"),
    ],
)
def test_a_mistyped_setting_names_the_closest_one(settings, kind, suggestion):
    with pytest.raises(kind, match=rf"Did you mean '{suggestion}'\?"):
        tm.Trainer(**settings)


def test_no_suggestion_when_nothing_is_close_and_the_signature_is_kept():
    with pytest.raises(ValueError) as caught:
        tm.Trainer(strategy="bogus")
    assert "Did you mean" not in str(caught.value)
    assert "max_epochs" in inspect.signature(tm.Trainer).parameters  # argparse/CLI read it


def _fit_warnings(**settings) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _trainer(**settings).fit(_Regressor(), _loader())
    return [str(w.message) for w in caught if issubclass(w.category, PossibleUserWarning)]


def test_an_epoch_shorter_than_the_logging_interval_is_said(tmp_path):
    said = _fit_warnings(default_root_dir=tmp_path)  # 4 batches, log_every_n_steps=50, the CSV/TB logger
    assert any("The number of training batches (4) is smaller than the logging interval" in m for m in said), said
    for quiet in ({"log_every_n_steps": 4}, {"logger": False}, {"fast_dev_run": True}):
        assert not any("logging interval" in m for m in _fit_warnings(default_root_dir=tmp_path, **quiet)), quiet


def test_lightning_warns_for_the_same_program(tmp_path):
    lightning = pytest.importorskip("lightning.pytorch")

    class Regressor(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lightning.Trainer(
            max_epochs=1, default_root_dir=tmp_path, enable_progress_bar=False, enable_model_summary=False
        ).fit(Regressor(), _loader())
    assert any("is smaller than the logging interval" in str(w.message) for w in caught)


def test_install_hints_name_extras_that_exist():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(EXTRAS) <= set(extras)
    assert install_hint("keras") == 'pip install "trainmesh[keras]"'


def test_every_install_hint_in_the_source_is_spelled_one_way():
    """A message telling the user to `pip install` an optional part goes through install_hint: a
    hand-written one ('pip install torchft', "pip install 'trainmesh[x]'") is how they drifted."""
    allowed = ("pip install torchvision", "pip install scikit-learn", "pip install 'keras==")  # not extras
    canonical = tuple(f'pip install "trainmesh[{extra}]"' for extra in EXTRAS)
    offenders = []
    for path in sorted((ROOT / "src" / "trainmesh").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "pip install" in node.value:
                rest = node.value
                for ok in allowed + canonical:
                    rest = rest.replace(ok, "")
                # only hints for what an extra of trainmesh installs (another package's own
                # message, e.g. Lightning's for wandb or comet_ml, keeps its owner's wording)
                if re.search(r"pip install (-U )?[\"'`]?(trainmesh|tensorboard|keras|matplotlib|torchft)\b", rest) and (
                    path.name != "install_hints.py"
                ):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value.strip()[:80]}")
    assert offenders == [], offenders
