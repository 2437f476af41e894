"""A LightningModule's and LightningDataModule's conveniences (freeze, dtype, hparams_initial,
TorchScript export, toggled_optimizer, from_datasets, load_from_checkpoint), each run on the same
program under Lightning 2.6 and under trainmesh and compared."""

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

L = pytest.importorskip("lightning.pytorch")

import trainmesh as tm  # noqa: E402


def _net_class(base):
    class Net(base):
        def __init__(self, width: int = 3, note: str = "a"):
            super().__init__()
            self.save_hyperparameters()
            self.layer = nn.Linear(width, 2)
            self.head = nn.Linear(2, 1)

        def forward(self, x):
            return self.head(torch.relu(self.layer(x)))

    return Net


@pytest.fixture(params=["trainmesh", "lightning"])
def pair(request):
    return _net_class(tm.Module)(), _net_class(L.LightningModule)()


def test_freeze_unfreeze_dtype_and_defaults_are_lightnings(pair):
    ours, theirs = pair
    for model in (ours, theirs):
        model.freeze()
    assert [p.requires_grad for p in ours.parameters()] == [p.requires_grad for p in theirs.parameters()]
    assert ours.training == theirs.training is False
    for model in (ours, theirs):
        model.unfreeze()
    assert [p.requires_grad for p in ours.parameters()] == [p.requires_grad for p in theirs.parameters()]
    assert ours.training == theirs.training is True
    assert ours.dtype == theirs.dtype == torch.float32
    assert ours.double().dtype == theirs.double().dtype == torch.float64
    for name in ("example_input_array", "strict_loading", "device_mesh", "fabric"):
        assert getattr(ours, name) == getattr(theirs, name), name
    for name in ("CHECKPOINT_HYPER_PARAMS_KEY", "CHECKPOINT_HYPER_PARAMS_NAME", "CHECKPOINT_HYPER_PARAMS_TYPE"):
        assert getattr(ours, name) == getattr(theirs, name), name
    assert tm.DataModule.CHECKPOINT_HYPER_PARAMS_KEY == L.LightningDataModule.CHECKPOINT_HYPER_PARAMS_KEY


def test_hparams_initial_keeps_what_save_hyperparameters_stored(pair):
    for model in pair:
        model.hparams.width = 99
        model.remove_ignored_hparams(["note"])
    ours, theirs = pair
    assert dict(ours.hparams_initial) == dict(theirs.hparams_initial) == {"width": 3, "note": "a"}
    assert dict(ours.hparams) == dict(theirs.hparams) == {"width": 99}


@pytest.mark.parametrize(("method", "manual"), [("script", False), ("trace", False), ("script", True)])
def test_to_torchscript_gives_the_modules_outputs(method, manual, tmp_path):
    """``manual``: a module that sets ``self.automatic_optimization = False`` (Lightning's
    models/test_torchscript.py BasicGAN; trainmesh's string annotation of it stopped torch.jit.script)."""
    torch.manual_seed(0)
    ours = _net_class(tm.Module)()
    theirs = _net_class(L.LightningModule)()
    theirs.load_state_dict(ours.state_dict())
    x = torch.randn(4, 3)
    for model in (ours, theirs):
        model.example_input_array = x
        if manual:
            model.automatic_optimization = False
    said, exported = [], []
    for model, path in ((ours, tmp_path / "m.pt"), (theirs, None)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            exported.append(model.to_torchscript(path, method=method))
        said.append([str(w.message) for w in caught if "to_torchscript" in str(w.message)])
    scripted, reference = exported
    assert said[0] == said[1] and said[0]  # Lightning 2.6.6's deprecation warning, in its words
    assert torch.equal(scripted(x), reference(x)) and torch.equal(torch.jit.load(tmp_path / "m.pt")(x), ours(x))
    assert ours.training  # the mode is restored


def test_to_torchscript_refuses_in_lightning_s_words():
    words = []
    for model in (_net_class(tm.Module)(), _net_class(L.LightningModule)()):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for kwargs in ({"method": "compile"}, {"method": "trace"}):
                with pytest.raises(ValueError) as error:
                    model.to_torchscript(**kwargs)
                words.append(str(error.value))
    assert words[:2] == words[2:]


def _hooked_net_class(base, seen):
    class Hooked(_net_class(base)):
        def on_before_batch_transfer(self, batch, dataloader_idx):
            seen.append(("before", type(self).__mro__[2].__module__.split(".")[0]))
            return batch

        def on_after_batch_transfer(self, batch, dataloader_idx):
            return batch * 2  # a user's normalisation, applied to the traced example too

    return Hooked


def _outcome(call, *args, **kwargs):
    try:
        call(*args, **kwargs)
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    return "ok"


def test_exports_feed_the_example_through_the_batch_hooks_and_fail_as_lightning_does():
    """p05 (l-progs14): the traced example passes the batch hooks; a script export with a wrong keyword
    leaves the module in eval mode (Lightning restores the mode after a successful export only);
    to_onnx without onnx, and a wrong method, say Lightning 2.6.6's words."""
    import importlib.util

    torch.manual_seed(0)
    seen: list = []
    ours, theirs = _hooked_net_class(tm.Module, seen)(), _hooked_net_class(L.LightningModule, seen)()
    theirs.load_state_dict(ours.state_dict())
    x = torch.randn(2, 3)
    outcomes = []
    for model in (ours, theirs):
        model.example_input_array = x
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            traced = model.to_torchscript(method="trace")
            said = [_outcome(model.to_torchscript, method="compile"), model.training]
            said += [_outcome(model.to_torchscript, method="script", example_input=x), model.training]
        if importlib.util.find_spec("onnx") is None:
            said.append(_outcome(model.to_onnx, "m.onnx").replace(type(model).__name__, "Net"))
        outcomes.append((said, traced(x)))
    assert outcomes[0][0] == outcomes[1][0]
    assert outcomes[0][0][1] is True and outcomes[0][0][3] is False
    assert torch.equal(outcomes[0][1], outcomes[1][1])  # traced on 2 * x: the same graph, the same numbers
    assert [who for _, who in seen] == ["trainmesh", "lightning"]


def _toggling(base, record):
    class TwoOptimizers(base):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False
            self.a, self.b = nn.Linear(2, 1), nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            (x,) = batch
            opt_a, opt_b = self.optimizers()
            with self.toggled_optimizer(opt_a):
                record.append([p.requires_grad for p in self.parameters()])
                loss = self.a(x).pow(2).mean()
                opt_a.zero_grad()
                self.manual_backward(loss)
                opt_a.step()
            record.append([p.requires_grad for p in self.parameters()])

        def configure_optimizers(self):
            return torch.optim.SGD(self.a.parameters(), lr=0.1), torch.optim.SGD(self.b.parameters(), lr=0.1)

    return TwoOptimizers()


def test_toggled_optimizer_freezes_the_other_optimizers_parameters_for_the_block(tmp_path):
    data = torch.utils.data.DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2)
    settings = dict(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    settings.update(enable_model_summary=False, default_root_dir=tmp_path, accelerator="cpu", devices=1)
    ours, theirs = [], []
    tm.Trainer(**settings).fit(_toggling(tm.Module, ours), train_dataloaders=data)
    L.Trainer(**settings).fit(_toggling(L.LightningModule, theirs), train_dataloaders=data)
    assert ours == theirs and ours[0] == [True, True, False, False] and ours[1] == [True] * 4


def test_from_datasets_builds_lightnings_loaders():
    g = torch.Generator().manual_seed(0)
    train, val = TensorDataset(torch.randn(10, 2, generator=g)), TensorDataset(torch.randn(6, 2, generator=g))
    ours = tm.DataModule.from_datasets(train, [val, val], batch_size=4)
    theirs = L.LightningDataModule.from_datasets(train, [val, val], batch_size=4)
    torch.manual_seed(1)
    our_batches = [b[0] for b in ours.train_dataloader()]
    torch.manual_seed(1)
    their_batches = [b[0] for b in theirs.train_dataloader()]
    assert all(torch.equal(a, b) for a, b in zip(our_batches, their_batches)) and len(our_batches) == 3
    assert [len(dl) for dl in ours.val_dataloader()] == [len(dl) for dl in theirs.val_dataloader()] == [2, 2]


def test_a_data_module_is_rebuilt_from_its_checkpointed_hyperparameters(tmp_path):
    class Data(tm.DataModule):
        def __init__(self, batch_size: int = 2, size: int = 8):
            super().__init__()
            self.save_hyperparameters()

        def train_dataloader(self):
            data = TensorDataset(torch.randn(self.hparams.size, 3), torch.randn(self.hparams.size, 1))
            return torch.utils.data.DataLoader(data, batch_size=self.hparams.batch_size)

    class Regressor(tm.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(3, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return F.mse_loss(self.layer(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = tm.Trainer(max_epochs=1, logger=False, enable_progress_bar=False, default_root_dir=tmp_path)
    trainer.fit(Regressor(), datamodule=Data(batch_size=4, size=12))
    path = tmp_path / "saved.ckpt"
    trainer.save_checkpoint(path)
    loaded = Data.load_from_checkpoint(str(path), size=6)
    assert dict(loaded.hparams) == {"batch_size": 4, "size": 6}
