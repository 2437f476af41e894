"""``is_shared_filesystem`` and ``utilities.parsing.save_hyperparameters`` against Lightning 2.6's
functions on one process (the two-process answers: tests/trainer/test_lightning_members_ddp.py)."""

from __future__ import annotations

import pytest

import trainmesh as tm
from trainmesh.utilities import is_shared_filesystem
from trainmesh.utilities.parsing import save_hyperparameters

lightning_utilities = pytest.importorskip("lightning.pytorch.utilities")


@pytest.mark.parametrize("where", ["cwd", "folder", "file", "remote"])
def test_one_process_answers_as_lightning(tmp_path, monkeypatch, where):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "f.txt").write_text("x")
    path = {"cwd": None, "folder": tmp_path, "file": tmp_path / "f.txt", "remote": "s3://bucket/run"}[where]
    theirs = lightning_utilities.is_shared_filesystem(object(), path)
    assert is_shared_filesystem(object(), path) == theirs


def _classes(base, **call):
    class Base(base):
        def __init__(self, width: int = 4, depth: int = 2, **kwargs) -> None:
            super().__init__()

    class Net(Base):
        def __init__(self, lr: float = 0.1, backbone: str = "big", width: int = 8, **kwargs) -> None:
            super().__init__(width=width, **kwargs)
            save_hp(self, *call.get("args", ()), ignore=call.get("ignore"), given_hparams=call.get("given"))

    return Net


CALLS = {
    "all": {},
    "names": {"args": ("lr", "width")},
    "ignore": {"ignore": ["backbone", "kwargs"]},
    "one_dict": {"args": ({"a": 1},)},
    "given": {"given": {"lr": 3.0, "width": 2}, "ignore": "width"},
}


@pytest.mark.parametrize("call", list(CALLS))
def test_save_hyperparameters_function_as_lightnings(call):
    import lightning.pytorch as pl
    from lightning.pytorch.utilities.parsing import save_hyperparameters as theirs_save

    global save_hp
    results = {}
    for name, base, save in (
        ("lightning", pl.LightningModule, theirs_save),
        ("trainmesh", tm.Module, save_hyperparameters),
    ):
        save_hp = save
        results[name] = dict(_classes(base, **CALLS[call])(lr=0.5, extra=7).hparams)
    assert results["trainmesh"] == results["lightning"]


save_hp = save_hyperparameters
