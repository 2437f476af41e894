"""The hyperparameter entries of a checkpoint (``hyper_parameters``, ``hparams_name`` and the data
module's) as Lightning 2.6 writes them for the same program."""

from __future__ import annotations

import collections
import importlib

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import differences, run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")

_KEYS = ("hyper_parameters", "hparams_name", "datamodule_hyper_parameters", "datamodule_hparams_name")


def saving_hyperparameters(L, root):
    """Three modules (all __init__ arguments, named ones, a config dict) and a data module, each
    fitted one step and saved with trainer.save_checkpoint: their hyperparameter entries."""

    class Data(L.pl.LightningDataModule):
        def __init__(self, batch_size=4, workers=0):
            super().__init__()
            self.save_hyperparameters()

        def train_dataloader(self):
            return DataLoader(TensorDataset(torch.ones(8, 4), torch.zeros(8, 1)), batch_size=self.hparams.batch_size)

    class Model(L.pl.LightningModule):
        def __init__(self, width=4, lr=0.1, config=None, *, how="all"):
            super().__init__()
            if how == "all":
                self.save_hyperparameters()
            elif how == "named":
                self.save_hyperparameters("width", "lr")
            else:
                self.save_hyperparameters(config)
            self.net = nn.Linear(width, 1)

        def training_step(self, batch, batch_idx):
            return F.mse_loss(self.net(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    found = {}
    for how, config in (("all", None), ("named", None), ("config", {"width": 4, "lr": 0.5})):
        trainer = L.pl.Trainer(**trainer_kwargs(root / how, logger=False, max_steps=1, enable_checkpointing=False))
        trainer.fit(Model(config=config, how=how), datamodule=Data(batch_size=2))
        trainer.save_checkpoint(root / f"{how}.ckpt")
        saved = torch.load(root / f"{how}.ckpt", weights_only=False)
        found[how] = {key: saved[key] for key in _KEYS if key in saved}
    return found


def test_checkpoint_hyperparameter_entries_are_lightning_s(tmp_path):
    found = run_both(saving_hyperparameters, tmp_path)
    theirs = found["lightning"]
    assert [theirs[how]["hparams_name"] for how in ("all", "named", "config")] == ["kwargs", "kwargs", "config"]
    assert theirs["all"]["datamodule_hparams_name"] == "kwargs"
    assert differences(theirs, found["trainmesh"]) == []


def loading_hyperparameters(L, root):
    """A module saved three ways (all __init__ arguments, named ones, a config dict given to
    save_hyperparameters) and a data module, each rebuilt with load_from_checkpoint (once with an
    override): the hyperparameters and the arguments each rebuilt object was constructed with."""

    class Data(L.pl.LightningDataModule):
        def __init__(self, batch_size=4, workers=0):
            super().__init__()
            self.save_hyperparameters()
            self.given = {"batch_size": batch_size, "workers": workers}

        def train_dataloader(self):
            return DataLoader(TensorDataset(torch.ones(8, 4), torch.zeros(8, 1)), batch_size=self.hparams.batch_size)

    class Model(L.pl.LightningModule):
        def __init__(self, width=4, lr=0.1, config=None, *, how="all"):
            super().__init__()
            self.given = {"width": width, "lr": lr, "config": config, "how": how}
            if how == "all":
                self.save_hyperparameters()
            elif how == "named":
                self.save_hyperparameters("width", "lr")
            elif how == "config":
                self.save_hyperparameters(config)
            elif how == "helper":
                self._keep(config)
            else:  # Lightning's function, called from __init__
                importlib.import_module(f"{L.pl.__name__}.utilities.parsing").save_hyperparameters(self, config)
            self.net = nn.Linear(width, 1)

        def _keep(self, given):  # a method of __init__ saving a dict it is handed
            self.save_hyperparameters(given)

        def training_step(self, batch, batch_idx):
            return F.mse_loss(self.net(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    found = {}
    given = {"width": 4, "lr": 0.5}
    for how, config in (("all", None), ("named", None), ("config", given), ("helper", given), ("utility", given)):
        trainer = L.pl.Trainer(**trainer_kwargs(root / how, logger=False, max_steps=1, enable_checkpointing=False))
        trainer.fit(Model(width=4, lr=0.3, config=config, how=how), datamodule=Data(batch_size=2))
        trainer.save_checkpoint(root / f"{how}.ckpt")
        for overrides in ({}, {"lr": 0.7}):
            loaded = Model.load_from_checkpoint(root / f"{how}.ckpt", **overrides)
            found[f"{how} {overrides}"] = {"given": loaded.given, "hparams": dict(loaded.hparams)}
    data = Data.load_from_checkpoint(root / "all.ckpt", workers=1)
    found["data"] = {"given": data.given, "hparams": dict(data.hparams)}
    return found


def test_load_from_checkpoint_builds_what_lightning_builds(tmp_path):
    """Before: a module that saved a config dict (``save_hyperparameters(config)``) was rebuilt as
    ``Model(width=4, lr=0.5)`` instead of Lightning's ``Model(config={...})``."""
    found = run_both(loading_hyperparameters, tmp_path)
    for how in ("config", "helper", "utility"):  # each is given the saved dict back as config=
        assert found["lightning"][f"{how} {{}}"]["given"]["config"] == {"width": 4, "lr": 0.5}
    assert differences(found["lightning"], found["trainmesh"]) == []


def hyperparameters_by_the_utility(L, root):
    """Lightning's ``utilities.parsing.save_hyperparameters(self, ...)`` called from ``__init__`` (all
    arguments, a dict, a name; on a bare ``HyperparametersMixin``), a subclass ignoring a name its base
    saved, a module among the arguments: ``hparams`` (its type, contents and print), ``hparams_initial``,
    ``_hparams_name``, the warnings; then one of them fitted with a CSVLogger: its checkpoint's entries and
    what the logger was given."""
    parsing = importlib.import_module(f"{L.pl.__name__}.utilities.parsing")
    mixin = next(c for c in L.pl.LightningModule.__mro__ if c.__name__ == "HyperparametersMixin")

    class Model(L.pl.LightningModule):
        def __init__(self, lr=0.1, width=4, config=None, *, how="all"):
            super().__init__()
            if how == "all":
                parsing.save_hyperparameters(self)
            elif how == "config":
                parsing.save_hyperparameters(self, config)
            else:
                parsing.save_hyperparameters(self, "width")
            self.net = nn.Linear(width, 1)

        def training_step(self, batch, batch_idx):
            loss = F.mse_loss(self.net(batch[0]), batch[1])
            self.log("loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.hparams.get("lr", 0.1))

    class Bare(mixin):
        def __init__(self, lr=0.1, width=2):
            super().__init__()
            parsing.save_hyperparameters(self)

    class Base(L.pl.LightningModule):
        def __init__(self, a=1, b=2):
            super().__init__()
            self.save_hyperparameters()

    class Sub(Base):
        def __init__(self, a=1, b=2, c=3):
            super().__init__(a, b)
            self.save_hyperparameters(ignore="a")

    class Config(collections.UserDict):  # a mapping that is not a dict
        pass

    class Keeper(L.pl.LightningModule):
        def __init__(self, config):
            super().__init__()
            self.save_hyperparameters(config)
            self.kept_as_given = self.hparams is config

    class Holder(L.pl.LightningModule):
        def __init__(self, net, lr=0.1):
            super().__init__()
            self.save_hyperparameters()

    def plain(values):  # a module among the values: compared by its print (two runs, two objects)
        return {k: repr(v) if isinstance(v, nn.Module) else v for k, v in values.items()}

    def seen(obj):
        hp = obj.hparams
        initial = obj.hparams_initial
        return {"name": obj.__dict__.get("_hparams_name", "unset"), "hparams": plain(hp), "initial": plain(initial),
                "types": [type(hp).__name__, type(initial).__name__], "print": repr(hp)}  # fmt: skip

    with pytest.warns(UserWarning) as caught:
        made = {"all": Model(), "config": Model(config={"lr": 0.2}, how="config"), "named": Model(how="named")}
        made.update(bare=Bare(), sub=Sub(), holder=Holder(nn.Linear(1, 1)), empty=L.pl.LightningModule())
        made.update(mapping=Keeper(Config(a=1, b=2)))
    found = {key: seen(obj) for key, obj in made.items()}
    found["mapping kept as given"] = made["mapping"].kept_as_given
    found["warnings"] = sorted(str(w.message) for w in caught if "nn.Module" in str(w.message))
    for how in ("all", "config"):
        logger = L.loggers.CSVLogger(root / how, name="run", version=0)
        trainer = L.pl.Trainer(**trainer_kwargs(root / how, logger=logger, max_steps=1, enable_checkpointing=False))
        trainer.fit(made[how], DataLoader(TensorDataset(torch.ones(4, 4), torch.zeros(4, 1)), batch_size=2))
        trainer.save_checkpoint(root / f"{how}.ckpt")
        saved = torch.load(root / f"{how}.ckpt", weights_only=False)
        found[f"{how} checkpoint"] = {key: saved[key] for key in _KEYS if key in saved}
        logger.save()
        written = sorted((root / how / "run" / "version_0").glob("hparams.yaml"))
        found[f"{how} logged"] = [path.read_text() for path in written]
    return found


def test_the_parsing_utility_saves_what_lightning_s_saves(tmp_path):
    """Before: trainmesh's ``utilities.parsing.save_hyperparameters(self)`` left ``_hparams_name`` None
    (the checkpoint's ``hparams_name`` missing) and sent the values to the logger, a subclass's
    ``ignore`` kept what its base saved, a module among them gave no warning, a mapping that is not a
    dict given to ``save_hyperparameters`` became an attribute dict (Lightning keeps it, type and all),
    ``hparams`` printed as a dict where Lightning's hparams print aligned rows."""
    found = run_both(hyperparameters_by_the_utility, tmp_path)
    theirs = found["lightning"]
    assert [theirs[how]["name"] for how in ("all", "config", "named", "bare")] == [
        "kwargs",
        "config",
        "kwargs",
        "kwargs",
    ]
    assert theirs["all checkpoint"]["hparams_name"] == "kwargs" and theirs["all logged"] in ([], ["{}\n"])
    assert theirs["mapping"]["types"] == ["Config", "Config"] and theirs["mapping kept as given"]
    assert theirs["sub"]["hparams"] == {"b": 2, "c": 3} and theirs["holder"]["print"].startswith('"lr":')
    assert differences(theirs, found["trainmesh"]) == []


@pytest.mark.parametrize("given", [5, [1, 2]])
def test_what_cannot_be_hyperparameters_raises_lightning_s_error_type(given):
    """A number or a list given to save_hyperparameters: Lightning raises ValueError (trainmesh raised
    TypeError, so a program catching Lightning's type missed it)."""
    raised = {}
    for name in ("lightning", "trainmesh"):
        base = importlib.import_module("lightning.pytorch" if name == "lightning" else "trainmesh").LightningModule

        class Saving(base):  # type: ignore[misc, valid-type]
            def __init__(self, value):
                super().__init__()
                self.save_hyperparameters(value)

        with pytest.raises(Exception) as caught:
            Saving(given)
        raised[name] = type(caught.value)
    assert raised["trainmesh"] is raised["lightning"] is ValueError


def subclass_chain(L, root):
    """cifar10-baseline's SWAResnet: a base class's ``__init__`` calls ``save_hyperparameters()`` while a
    subclass is built (Lightning collects the subclass's arguments too), then the subclass's own
    ``save_hyperparameters("lr")`` adds to them."""

    class Base(L.pl.LightningModule):
        def __init__(self, lr=0.05):
            super().__init__()
            self.save_hyperparameters()

    class Averaged(Base):
        def __init__(self, trained_model, lr=0.01):
            super().__init__()
            self.after_base = dict(self.hparams)
            self.save_hyperparameters("lr")

    class Wider(Base):
        def __init__(self, width=3, lr=0.01):
            super().__init__()
            self.save_hyperparameters("lr")

    averaged = Averaged(nn.Linear(2, 2))
    return {
        "after_base": {k: repr(v) for k, v in averaged.after_base.items()},
        "averaged": {k: repr(v) for k, v in averaged.hparams.items()},
        "averaged_initial": {k: repr(v) for k, v in averaged.hparams_initial.items()},
        "wider": dict(Wider().hparams),
    }


def test_a_base_class_saves_the_subclass_s_arguments_as_lightning(tmp_path):
    """The base's save_hyperparameters() holds the subclass's arguments (trained_model, lr=0.01), and the
    subclass's save_hyperparameters("lr") keeps them: the same hparams as Lightning 2.6.6 (and 1.9.5, run
    by hand: {'lr': 0.01, 'trained_model': ...}). Before, trainmesh read only the calling __init__
    ({'lr': 0.05}, then {'lr': 0.01})."""
    found = run_both(subclass_chain, tmp_path)
    assert found["lightning"]["wider"] == {"lr": 0.01, "width": 3}
    assert differences(found["lightning"], found["trainmesh"]) == []


def saved_before_the_base_init(L, root):
    """``self.save_hyperparameters()`` called before ``super().__init__()`` (the RL-GAN-Net autoencoder,
    l-progs10 p06) in a module and a data module, fitted one step with a CSVLogger: what hparams hold,
    the checkpoint's entries and the logged hparams.yaml."""

    class Data(L.pl.LightningDataModule):
        def __init__(self, batch_size=2):
            self.save_hyperparameters()
            super().__init__()

        def train_dataloader(self):
            return DataLoader(TensorDataset(torch.ones(4, 2), torch.zeros(4, 1)), batch_size=self.hparams.batch_size)

    class Early(L.pl.LightningModule):
        def __init__(self, width=2, split=0):
            self.save_hyperparameters()
            super().__init__()
            self.net = nn.Linear(width, 1)

        def training_step(self, batch, batch_idx):
            return F.mse_loss(self.net(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    model, data = Early(width=2, split=3), Data(batch_size=2)
    logger = L.pl.loggers.CSVLogger(root)
    trainer = L.pl.Trainer(**trainer_kwargs(root, logger=logger, max_steps=1, enable_checkpointing=False))
    trainer.fit(model, datamodule=data)
    trainer.save_checkpoint(root / "early.ckpt")
    saved = torch.load(root / "early.ckpt", weights_only=False)
    yaml_file = root / "lightning_logs" / "version_0" / "hparams.yaml"
    return {
        "hparams": dict(model.hparams),
        "datamodule_hparams": dict(data.hparams),
        "entries": {key: saved[key] for key in _KEYS if key in saved},
        "logged": yaml_file.read_text().strip() if yaml_file.exists() else None,
    }


def test_hyperparameters_saved_before_the_base_init_are_kept_and_not_logged(tmp_path):
    """Lightning 2.6.6 (and pytorch-lightning 1.9.5, run by hand: l-progs10 p06) keep what
    save_hyperparameters() stored before super().__init__(), in hparams and in the checkpoint, and do not
    log it (their HyperparametersMixin.__init__ sets _log_hyperparams = False). Before, trainmesh's Module
    emptied hparams there (the checkpoint had no hyper_parameters) and both logged their hparams."""
    found = run_both(saved_before_the_base_init, tmp_path)
    assert found["lightning"]["hparams"] == {"width": 2, "split": 3}
    assert differences(found["lightning"], found["trainmesh"]) == []
