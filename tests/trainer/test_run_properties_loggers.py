"""``trainer.logger = ...`` and ``trainer.loggers = ...`` as Lightning 2.6's setters (its
``tests_pytorch/trainer/properties/test_loggers.py::test_trainer_loggers_setters``): one logger, or
None / [] for none; before, ``trainer.logger = x`` raised (a property without a setter) and
``trainer.loggers = None`` left None where Lightning has []."""

import pytest

import trainmesh as tm
from trainmesh.loggers import CSVLogger as TmCSVLogger

pl = pytest.importorskip("lightning.pytorch")
from lightning.pytorch.loggers import CSVLogger as PlCSVLogger  # noqa: E402


def _setters(Trainer, CSVLogger, root):
    trainer = Trainer(default_root_dir=root)
    first, second = CSVLogger(root / "a"), CSVLogger(root / "b")
    seen = [type(trainer.logger).__name__]

    def note():
        names = {id(first): "first", id(second): "second"}
        seen.append((names.get(id(trainer.logger), trainer.logger), [names[id(x)] for x in trainer.loggers]))

    for value in (first, None, False):
        trainer.logger = value
        note()
    for value in ([first, second], [second], [], None):
        trainer.loggers = value
        note()
    return seen


def test_the_logger_setters_set_what_lightning_s_set(tmp_path):
    theirs = _setters(pl.Trainer, PlCSVLogger, tmp_path / "pl")
    ours = _setters(tm.Trainer, TmCSVLogger, tmp_path / "tm")
    assert ours == theirs
    assert theirs[1:3] == [("first", ["first"]), (None, [])]
