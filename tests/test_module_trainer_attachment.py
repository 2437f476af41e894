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
