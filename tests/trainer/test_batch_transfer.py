"""Lightning's batch-transfer hooks (on_before_batch_transfer, transfer_batch_to_device,
on_after_batch_transfer), on the Module and the DataModule: called on every batch of training,
the sanity check, validation, test and predict, with Lightning's arguments and dataloader_idx, in
Lightning's order among the other hooks; the batch they return is the one the step sees. (ddp:
test_data_hooks_ddp.py.)"""

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from helpers.models import quiet_trainer
from trainmesh.trainer.batch_transfer import choose_batch_hooks


def ones(n=2):
    return DataLoader(TensorDataset(torch.ones(n, 2)), batch_size=2)


class Recorder(tm.Module):
    """Records the data and mode hooks of this part, and the hooks around them, in one list."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)
        self.calls = []

    def _r(self, *call):
        self.calls.append(call)

    def prepare_data(self):
        self._r("prepare_data")

    def configure_callbacks(self):
        self._r("configure_callbacks")
        return []

    def setup(self, stage):
        self._r("setup", stage)

    def on_fit_start(self):
        self._r("on_fit_start")

    def on_train_start(self):
        self._r("on_train_start")

    # trainmesh does not call on_validation_start/end in the sanity check (Lightning does): only
    # this part's hooks are compared there.
    def on_validation_start(self):
        if not self.trainer.sanity_checking:
            self._r("on_validation_start")

    def on_validation_end(self):
        if not self.trainer.sanity_checking:
            self._r("on_validation_end")

    def on_test_start(self):
        self._r("on_test_start")

    def on_test_end(self):
        self._r("on_test_end")

    def on_predict_start(self):
        self._r("on_predict_start")

    def on_predict_end(self):
        self._r("on_predict_end")

    def on_validation_model_eval(self):
        self._r("on_validation_model_eval")
        super().on_validation_model_eval()

    def on_validation_model_train(self):
        self._r("on_validation_model_train")
        super().on_validation_model_train()

    def on_validation_model_zero_grad(self):
        self._r("on_validation_model_zero_grad")
        super().on_validation_model_zero_grad()

    def on_test_model_eval(self):
        self._r("on_test_model_eval")
        super().on_test_model_eval()

    def on_test_model_train(self):
        self._r("on_test_model_train")
        super().on_test_model_train()

    def on_predict_model_eval(self):
        self._r("on_predict_model_eval")
        super().on_predict_model_eval()

    def on_before_batch_transfer(self, batch, dataloader_idx):
        self._r("on_before_batch_transfer", dataloader_idx)
        return batch

    def transfer_batch_to_device(self, batch, device, dataloader_idx):
        self._r("transfer_batch_to_device", str(device), dataloader_idx)
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def on_after_batch_transfer(self, batch, dataloader_idx):
        self._r("on_after_batch_transfer", dataloader_idx)
        return batch

    def on_train_batch_start(self, batch, batch_idx):
        self._r("on_train_batch_start", batch_idx)

    def on_validation_batch_start(self, batch, batch_idx, dataloader_idx=0):
        self._r("on_validation_batch_start", batch_idx, dataloader_idx)

    def training_step(self, batch, batch_idx):
        self._r("training_step", batch_idx)
        return self.layer(batch[0]).sum()

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        self._r("validation_step", batch_idx, dataloader_idx)

    def test_step(self, batch, batch_idx):
        self._r("test_step", batch_idx)

    def predict_step(self, batch, batch_idx):
        self._r("predict_step", batch_idx)
        return 1

    def train_dataloader(self):
        return ones(4)

    def val_dataloader(self):
        return [ones(), ones()]

    def test_dataloader(self):
        return ones()

    def predict_dataloader(self):
        return ones()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _transfer(idx):
    return [
        ("on_before_batch_transfer", idx),
        ("transfer_batch_to_device", "cpu", idx),
        ("on_after_batch_transfer", idx),
    ]


def _validation():
    return [
        *_transfer(0),
        ("on_validation_batch_start", 0, 0),
        ("validation_step", 0, 0),
        *_transfer(1),
        ("on_validation_batch_start", 0, 1),
        ("validation_step", 0, 1),
    ]


# Lightning 2.6.6, the same program (Trainer(max_epochs=1, num_sanity_val_steps=1), fit, test,
# predict), less on_validation_start/end in the sanity check (see Recorder).
LIGHTNING_ORDER = [
    ("configure_callbacks",),
    ("prepare_data",),
    ("setup", "fit"),
    ("on_fit_start",),
    ("on_validation_model_eval",),  # the sanity check
    *_validation(),
    ("on_validation_model_train",),
    ("on_train_start",),
    *_transfer(0),
    ("on_train_batch_start", 0),
    ("training_step", 0),
    *_transfer(0),
    ("on_train_batch_start", 1),
    ("training_step", 1),
    ("on_validation_model_zero_grad",),  # validation inside fit only
    ("on_validation_model_eval",),
    ("on_validation_start",),
    *_validation(),
    ("on_validation_end",),
    ("on_validation_model_train",),
    ("configure_callbacks",),
    ("prepare_data",),
    ("setup", "test"),
    ("on_test_model_eval",),
    ("on_test_start",),
    *_transfer(0),
    ("test_step", 0),
    ("on_test_end",),
    ("on_test_model_train",),
    ("configure_callbacks",),
    ("prepare_data",),
    ("setup", "predict"),
    ("on_predict_model_eval",),
    ("on_predict_start",),
    *_transfer(0),
    ("predict_step", 0),
    ("on_predict_end",),
]


def test_data_and_mode_hooks_run_where_lightning_runs_them_in_fit_test_predict():
    module = Recorder()
    trainer = quiet_trainer(max_epochs=1, num_sanity_val_steps=1)
    trainer.fit(module)
    trainer.test(module, verbose=False)
    trainer.predict(module)
    assert module.calls == LIGHTNING_ORDER


class Shifted(tm.Module):
    """on_before_batch_transfer adds 10 * dataloader_idx, transfer_batch_to_device (through
    Lightning's default) doubles, on_after_batch_transfer adds 1: steps record what they get."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.seen = {}

    def on_before_batch_transfer(self, batch, dataloader_idx):
        return [batch[0] + 10 * dataloader_idx, batch[1]]

    def transfer_batch_to_device(self, batch, device, dataloader_idx):
        assert device == torch.device("cpu")
        return [t * 2 for t in super().transfer_batch_to_device(batch, device, dataloader_idx)]

    def on_after_batch_transfer(self, batch, dataloader_idx):
        return [batch[0] + 1, batch[1]]

    def _saw(self, stage, batch):
        self.seen.setdefault(stage, []).append(batch[0].flatten().tolist())

    def training_step(self, batch, batch_idx):
        self._saw("train", batch)
        return F.mse_loss(self.layer(batch[0]), batch[1])

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        self._saw("sanity" if self.trainer.sanity_checking else f"val{dataloader_idx}", batch)

    def test_step(self, batch, batch_idx):
        self._saw("test", batch)

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        self._saw(f"predict{dataloader_idx}", batch)
        return batch[0]

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def data(start=0.0):
    x = torch.arange(4, dtype=torch.float32).unsqueeze(1) + start
    return DataLoader(TensorDataset(x, 3 * x), batch_size=2)


def changed(x, idx=0):
    return [(2 * (v + 10 * idx) + 1) for v in x]


def test_the_hooks_change_the_batch_every_step_sees_with_its_dataloader_idx():
    module = Shifted()
    trainer = quiet_trainer(max_epochs=1, num_sanity_val_steps=1)
    trainer.fit(module, data(), [data(), data(100.0)])
    trainer.test(module, data(), verbose=False)
    predictions = trainer.predict(module, [data(), data()])
    assert module.seen["train"] == [changed([0, 1]), changed([2, 3])]
    assert module.seen["sanity"] == [changed([0, 1]), changed([100, 101], 1)]  # one batch per loader
    assert module.seen["val0"] == [changed([0, 1]), changed([2, 3])]
    assert module.seen["val1"] == [changed([100, 101], 1), changed([102, 103], 1)]
    assert module.seen["test"] == [changed([0, 1]), changed([2, 3])]
    assert module.seen["predict1"] == [changed([0, 1], 1), changed([2, 3], 1)]
    assert predictions[1][0].flatten().tolist() == changed([0, 1], 1)


def test_training_on_the_changed_batches_matches_plain_torch():
    torch.manual_seed(0)
    module = Shifted()
    torch.manual_seed(0)
    layer = torch.nn.Linear(1, 1)
    quiet_trainer(max_epochs=2).fit(module, data())
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.01)
    for _ in range(2):
        for x, y in data():
            optimizer.zero_grad()
            F.mse_loss(layer(2 * x + 1), 2 * y).backward()
            optimizer.step()
    assert torch.equal(module.layer.weight, layer.weight) and torch.equal(module.layer.bias, layer.bias)


def _data_class(**hooks):
    return type("Data", (tm.DataModule,), {"train_dataloader": lambda self: data(), **hooks})


class SeesTrain(tm.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.seen = []

    def training_step(self, batch, batch_idx):
        self.seen.append(batch[0].flatten().tolist())
        return F.mse_loss(self.layer(batch[0]), batch[1])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def test_the_data_module_hooks_run_and_win_over_the_modules_as_in_lightning():
    """Each hook chosen on its own: the DataModule's where it defines it (a warning where both
    do), else the Module's."""
    Data = _data_class(
        on_before_batch_transfer=lambda self, batch, idx: [batch[0] + 1, batch[1]],
        on_after_batch_transfer=lambda self, batch, idx: [batch[0] * 10, batch[1]],
    )
    Module = type(
        "Module",
        (SeesTrain,),
        {
            "on_after_batch_transfer": lambda self, batch, idx: [batch[0] * -1, batch[1]],
            "transfer_batch_to_device": lambda self, batch, device, idx: [batch[0] - 0.5, batch[1]],
        },
    )
    module = Module()
    with pytest.warns(UserWarning, match="both define on_after_batch_transfer: the data module's runs"):
        quiet_trainer(max_epochs=1).fit(module, datamodule=Data())
    assert module.seen == [[5.0, 15.0], [25.0, 35.0]]  # ((x + 1) - 0.5) * 10


def test_without_overrides_batches_are_not_walked_on_the_cpu():
    """The fast path: no hook overridden, a CPU run in fp32 hands out the loader's own batches."""
    assert choose_batch_hooks(SeesTrain(), tm.DataModule()) is None
    batches = []

    class Keeps(SeesTrain):
        def on_train_batch_start(self, batch, batch_idx):
            batches.append(batch)

    loader = data()
    expected = list(loader)
    quiet_trainer(max_epochs=1).fit(Keeps(), loader)
    assert [b[0].tolist() for b in batches] == [b[0].tolist() for b in expected]
    hooked = choose_batch_hooks(Shifted(), None)
    assert hooked.before is not None and hooked.transfer is not None and hooked.after is not None


def test_under_a_true_precision_the_hooks_see_the_converted_batch():
    """Lightning converts the input to the precision's dtype before on_before_batch_transfer."""
    dtypes = []

    class Bf16(SeesTrain):
        def on_before_batch_transfer(self, batch, dataloader_idx):
            dtypes.append(batch[0].dtype)
            return batch

    quiet_trainer(max_epochs=1, precision="bf16-true").fit(Bf16(), data())
    assert dtypes == [torch.bfloat16, torch.bfloat16]


@pytest.mark.cuda
def test_on_a_gpu_the_hooks_get_the_device_and_the_default_transfer_moves_the_batch():
    seen = []

    class OnGpu(SeesTrain):
        def on_before_batch_transfer(self, batch, dataloader_idx):
            seen.append(("before", batch[0].device.type))
            return batch

        def transfer_batch_to_device(self, batch, device, dataloader_idx):
            seen.append(("transfer", str(device)))
            return super().transfer_batch_to_device(batch, device, dataloader_idx)

        def on_after_batch_transfer(self, batch, dataloader_idx):
            seen.append(("after", batch[0].device.type))
            return batch

    quiet_trainer(max_epochs=1, accelerator="gpu", limit_train_batches=1).fit(OnGpu(), data())
    assert seen == [("before", "cpu"), ("transfer", "cuda:0"), ("after", "cuda")]
