"""What ``load_from_checkpoint`` gives back of saved hyperparameters, under Lightning 2.6 and trainmesh
(from Lightning's tests_pytorch/models/test_hparams.py::test_omega_conf_hparams and
::test_load_past_checkpoint):

- an omegaconf ``DictConfig`` given to ``save_hyperparameters`` is saved as it is with its type
  (``hparams_type`` / ``datamodule_hparams_type``), so the rebuilt module and data module get a
  ``DictConfig`` again, and an override reaches the config's interpolations (``ref: ${lr}``);
- a checkpoint from before pytorch-lightning 0.8 that keeps them under ``module_arguments`` (type
  named "Namespace") still gives them.

Before: trainmesh saved a dict, so the reloaded ``hparams`` were an ``AttributeDict``, and it read no
``module_arguments`` (the ``__init__`` defaults came back: a silent difference)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")
OmegaConf = pytest.importorskip("omegaconf").OmegaConf


def reloading_program(L, root):
    class Model(L.pl.LightningModule):
        def __init__(self, hparams=None, lr=0.1):
            super().__init__()
            self.save_hyperparameters(hparams) if hparams is not None else self.save_hyperparameters()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class Data(L.pl.LightningDataModule):
        def __init__(self, hparams):
            super().__init__()
            self.save_hyperparameters(hparams)

        def train_dataloader(self):
            return DataLoader(TensorDataset(torch.ones(4, 4)), batch_size=self.hparams.batch_size)

    conf = OmegaConf.create({"lr": 0.5, "sizes": [3, {"a": 1}], "ref": "${lr}"})
    trainer = L.pl.Trainer(**trainer_kwargs(root, max_steps=1, logger=False, enable_checkpointing=False))
    trainer.fit(Model(conf), datamodule=Data(OmegaConf.create({"batch_size": 2})))
    trainer.save_checkpoint(root / "conf.ckpt")
    saved = torch.load(root / "conf.ckpt", weights_only=False)
    found = {"types": {k: saved[k] for k in ("hparams_type", "datamodule_hparams_type")}}
    for name, made in [
        ("module", Model.load_from_checkpoint(root / "conf.ckpt", weights_only=False)),
        ("override", Model.load_from_checkpoint(root / "conf.ckpt", weights_only=False, lr=0.25)),
        ("datamodule", Data.load_from_checkpoint(root / "conf.ckpt", weights_only=False)),
    ]:
        found[name] = (type(made.hparams).__name__, OmegaConf.to_container(OmegaConf.create(dict(made.hparams))))

    plain = L.pl.Trainer(**trainer_kwargs(root, max_steps=1, logger=False, enable_checkpointing=False))
    plain.fit(Model(lr=0.1), DataLoader(TensorDataset(torch.ones(4, 4))))
    plain.save_checkpoint(root / "past.ckpt")
    past = torch.load(root / "past.ckpt", weights_only=True)  # as pytorch-lightning 0.7 wrote it
    past["module_arguments"] = {**past.pop("hyper_parameters"), "lr": -17}
    past["hparams_type"] = "Namespace"
    torch.save(past, root / "past.ckpt")
    made = Model.load_from_checkpoint(root / "past.ckpt")
    found["past"] = (type(made.hparams).__name__, dict(made.hparams))
    return found


def test_saved_hyperparameters_come_back_as_lightning_gives_them(tmp_path):
    found = run_both(reloading_program, tmp_path)
    theirs, ours = found["lightning"], found["trainmesh"]
    assert theirs["module"] == ("DictConfig", {"lr": 0.5, "sizes": [3, {"a": 1}], "ref": 0.5})
    assert theirs["override"][1]["ref"] == 0.25
    assert theirs["past"] == ("AttributeDict", {"hparams": None, "lr": -17})
    assert ours == theirs


def unpicklable_program(L, root):
    class Model(L.pl.LightningModule):
        def __init__(self, foo="bar", pickle_me=(lambda x: x + 1)):
            super().__init__()
            self.save_hyperparameters()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    model = Model()
    trainer = L.pl.Trainer(**trainer_kwargs(root, max_steps=1, logger=False, enable_checkpointing=False))
    with pytest.warns(UserWarning) as caught:
        trainer.fit(model, DataLoader(TensorDataset(torch.ones(4, 4))))
    return [str(w.message) for w in caught if "pickle" in str(w.message)], dict(model.hparams)


def test_an_unpicklable_hyperparameter_is_dropped_at_fit_as_lightning_drops_it(tmp_path):
    found = run_both(unpicklable_program, tmp_path)
    assert found["lightning"] == (
        [
            "Attribute 'pickle_me' removed from hparams because it cannot be pickled. You can suppress this warning"
            " by setting `self.save_hyperparameters(ignore=['pickle_me'])`."
        ],
        {"foo": "bar"},
    )
    assert found["trainmesh"] == found["lightning"]


@pytest.mark.parametrize("given", [(42,), (3.14, "abc"), ([1, 2],)])
def test_a_lone_config_that_is_no_mapping_is_refused_in_lightnings_words(given):
    import lightning.pytorch as lightning

    import trainmesh

    def attempt(pl):
        class Model(pl.LightningModule):
            def __init__(self, arg1, arg2=None):
                super().__init__()
                self.save_hyperparameters(*given)

        with pytest.raises(ValueError) as caught:
            Model(given[0])
        return str(caught.value)

    theirs, ours = attempt(lightning), attempt(trainmesh)
    assert theirs.startswith(("Primitives (<class 'bool'>", "Unsupported config type of <class 'list'>"))
    assert ours.startswith(theirs)


@pytest.mark.parametrize("given", [(1, 2), ({"a": 1}, 2), ("a", 1, 2), ("a", {"x": 1}), (0,), ({},), ("",)])
def test_arguments_that_are_no_names_are_taken_as_lightning_takes_them(given):
    """Several arguments that are no names are ignored (only the names among them saved), one beside
    names is the config, and one empty (0, {}, and the empty name "") saves nothing: Lightning 2.6.6's
    ``save_hyperparameters`` (trainmesh refused the first three with a ValueError and saved ``a`` for the
    fourth, and refused "" as no argument of ``__init__``)."""
    import lightning.pytorch as lightning

    import trainmesh

    def saved(pl):
        class Model(pl.LightningModule):
            def __init__(self, a=5, b=6):
                super().__init__()
                self.save_hyperparameters(*given)

        model = Model()
        return dict(model.hparams), dict(model.hparams_initial), model.__dict__.get("_hparams_name", "unset")

    assert saved(trainmesh) == saved(lightning)
