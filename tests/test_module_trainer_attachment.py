"""``model.trainer`` as Lightning 2.6's ``LightningModule`` has it: reading it before a Trainer is
attached raises its ``RuntimeError``; the setter attaches a Trainer (and the submodules that are
Lightning modules too) and ``None`` detaches; ``model.fabric`` is None."""

from __future__ import annotations

import pytest
import torch


def _answers(framework) -> list[object]:
    class Inner(framework.LightningModule):
        pass

    class Model(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.inner = Inner()
            self.layer = torch.nn.Linear(1, 1)

    def read(module) -> object:
        try:
            return module.trainer is trainer
        except RuntimeError as error:
            return f"RuntimeError: {error}"

    model = Model()
    trainer = framework.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False)
    answers: list[object] = [read(model), model.fabric]
    model.trainer = trainer
    answers += [read(model), read(model.inner)]
    model.trainer = None
    answers += [read(model), read(model.inner)]
    return answers


def test_the_trainer_property_and_setter_answer_as_lightning_s() -> None:
    lightning = pytest.importorskip("lightning.pytorch")
    import trainmesh

    expected = _answers(lightning)
    assert expected[0] == "RuntimeError: _answers.<locals>.Model is not attached to a `Trainer`."
    assert _answers(trainmesh) == expected


def _inner_sees_the_trainer(framework) -> list[bool]:
    from torch.utils.data import DataLoader, TensorDataset

    class Inner(framework.LightningModule):
        def forward(self, x):
            return x

    class Model(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.inner = Inner()
            self.layer = torch.nn.Linear(1, 1)
            self.seen: list[bool] = []

        def training_step(self, batch, batch_idx):
            self.seen.append(self.inner.trainer is self.trainer)
            return self.layer(self.inner(batch[0])).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    model = Model()
    trainer = framework.Trainer(
        max_steps=2, accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False
    )
    trainer.fit(model, DataLoader(TensorDataset(torch.ones(4, 1)), batch_size=2))
    return model.seen


def test_a_lightning_submodule_sees_the_trainer_during_fit_as_in_lightning() -> None:
    lightning = pytest.importorskip("lightning.pytorch")
    import trainmesh

    expected = _inner_sees_the_trainer(lightning)
    assert expected == [True, True]
    assert _inner_sees_the_trainer(trainmesh) == expected
