"""The order of every hook call in fit (with validation and the sanity check), validate, test,
predict, a checkpoint's save and load, and a failed run, with a module, a callback and a data
module that record each call: Lightning's hook-order test (tests_pytorch/models/test_hooks.py) done
for trainmesh (trainer/hooks.py).

Every expected list below is the order Lightning 2.6.6 recorded for the same program (the same
classes built on lightning.pytorch's LightningModule, Callback and LightningDataModule, run by its
Trainer), less two hooks whose timing trainmesh does not share, both outside the callbacks-versus-
module order: ``on_before_zero_grad`` (Lightning zeroes gradients before the next step's backward,
trainmesh right after the step: trainer/optimization_hooks.py) and ``configure_model`` (Lightning
calls it in every stage, trainmesh once per model object).
"""

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from trainmesh.callbacks import EarlyStopping, ModelCheckpoint

MODULE_HOOKS = """
    setup teardown configure_optimizers on_fit_start on_fit_end on_train_start on_train_end
    on_train_epoch_start on_train_epoch_end on_train_batch_start on_train_batch_end
    on_validation_start on_validation_end on_validation_epoch_start on_validation_epoch_end
    on_validation_batch_start on_validation_batch_end on_test_start on_test_end on_test_epoch_start
    on_test_epoch_end on_test_batch_start on_test_batch_end on_predict_start on_predict_end
    on_predict_epoch_start on_predict_epoch_end on_predict_batch_start on_predict_batch_end
    on_before_backward on_after_backward on_before_optimizer_step on_save_checkpoint on_load_checkpoint
""".split()
CALLBACK_HOOKS = [h for h in MODULE_HOOKS if h != "configure_optimizers"] + [
    "on_sanity_check_start",
    "on_sanity_check_end",
    "on_exception",
    "state_dict",
    "load_state_dict",
]
DATAMODULE_HOOKS = ["prepare_data", "setup", "teardown", "state_dict", "load_state_dict", "on_exception"]

CALLS: list[str] = []


def _recorder(name, prefix=""):
    def hook(self, *args, **kwargs):
        CALLS.append(f"{getattr(self, 'prefix', prefix)}{name}")
        if name == "state_dict":
            return {"saved": 1}
        if name == "configure_optimizers":
            return torch.optim.SGD(self.parameters(), lr=0.1)
        return None

    return hook


class Net(tm.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.layer(x)

    def training_step(self, batch, batch_idx):
        CALLS.append("training_step")
        loss = F.cross_entropy(self(batch[0]), batch[1])
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        CALLS.append("validation_step")
        self.log("val_loss", F.cross_entropy(self(batch[0]), batch[1]))

    def test_step(self, batch, batch_idx):
        CALLS.append("test_step")

    def predict_step(self, batch, batch_idx):
        CALLS.append("predict_step")
        return self(batch[0])


for _name in MODULE_HOOKS:
    setattr(Net, _name, _recorder(_name))


class Recorder(tm.Callback):
    prefix = "Callback."


for _name in CALLBACK_HOOKS:
    setattr(Recorder, _name, _recorder(_name))


class Recorder2(Recorder):
    prefix = "Callback2."


def loader():
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(4, 4, generator=g), torch.randint(0, 2, (4,), generator=g)), 2)


class Data(tm.DataModule):
    prefix = "DataModule."

    def train_dataloader(self):
        return loader()

    val_dataloader = test_dataloader = predict_dataloader = train_dataloader


for _name in DATAMODULE_HOOKS:
    setattr(Data, _name, _recorder(_name))


class Checkpoint(ModelCheckpoint):
    def on_train_epoch_end(self, trainer, module):
        CALLS.append("ModelCheckpoint.on_train_epoch_end")
        super().on_train_epoch_end(trainer, module)

    def on_validation_end(self, trainer, module):
        CALLS.append("ModelCheckpoint.on_validation_end")
        super().on_validation_end(trainer, module)


class Stopping(EarlyStopping):
    def on_train_epoch_end(self, trainer, module):
        CALLS.append("EarlyStopping.on_train_epoch_end")
        super().on_train_epoch_end(trainer, module)

    def on_validation_end(self, trainer, module):
        CALLS.append("EarlyStopping.on_validation_end")
        super().on_validation_end(trainer, module)


def trainer(root, callbacks, **kwargs):
    checkpointing = any(isinstance(cb, ModelCheckpoint) for cb in callbacks)
    settings = dict(max_epochs=1, num_sanity_val_steps=1, limit_val_batches=1, enable_checkpointing=checkpointing)
    return tm.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        callbacks=callbacks,
        **{**settings, **kwargs},
    )


def taken():
    out = list(CALLS)
    CALLS.clear()
    return out


class Failing(Net):
    def training_step(self, batch, batch_idx):
        raise RuntimeError("boom")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """One run of each case; the calls each recorded."""
    root = str(tmp_path_factory.mktemp("order"))
    out = {}
    CALLS.clear()
    torch.manual_seed(0)
    model, data = Net(), Data()
    first = trainer(root, [Recorder()])
    first.fit(model, datamodule=data)
    out["fit"] = taken()
    first.validate(model, datamodule=data, verbose=False)
    out["validate"] = taken()
    first.test(model, datamodule=data, verbose=False)
    out["test"] = taken()
    first.predict(model, datamodule=data)
    out["predict"] = taken()
    path = f"{root}/a.ckpt"
    first.save_checkpoint(path)
    out["save_checkpoint"] = taken()
    trainer(root, [Recorder()], max_epochs=2).fit(Net(), datamodule=Data(), ckpt_path=path)
    out["fit_resumed"] = taken()
    first.test(model, datamodule=data, verbose=False, ckpt_path=path)
    out["test_ckpt"] = taken()
    with pytest.raises(RuntimeError, match="boom"):
        trainer(root, [Recorder()], num_sanity_val_steps=0).fit(Failing(), datamodule=Data())
    out["exception"] = taken()
    # Monitoring callbacks (listed in the middle: both Trainers put ModelCheckpoint last).
    callbacks = [
        Recorder(),
        Checkpoint(monitor="val_loss", dirpath=f"{root}/ck"),
        Stopping(monitor="val_loss"),
        Recorder2(),
    ]
    trainer(root, callbacks).fit(Net(), datamodule=Data())
    out["fit_monitoring"] = [c for c in taken() if "epoch_end" in c or "validation_end" in c]
    callbacks = [Recorder(), Checkpoint(monitor="train_loss", dirpath=f"{root}/ck2"), Recorder2()]
    trainer(root, callbacks, limit_val_batches=0).fit(Net(), loader())
    out["fit_monitoring_no_val"] = [c for c in taken() if "epoch_end" in c or "validation_end" in c]
    return out


def _validation_run():
    return """
        Callback.on_validation_start on_validation_start
        Callback.on_validation_epoch_start on_validation_epoch_start
        Callback.on_validation_batch_start on_validation_batch_start validation_step
        Callback.on_validation_batch_end on_validation_batch_end
        Callback.on_validation_epoch_end on_validation_epoch_end
        Callback.on_validation_end on_validation_end
    """


TRAIN_BATCH = """
    Callback.on_train_batch_start on_train_batch_start training_step
    Callback.on_before_backward on_before_backward Callback.on_after_backward on_after_backward
    Callback.on_before_optimizer_step on_before_optimizer_step
    Callback.on_train_batch_end on_train_batch_end
"""
FIT_LOOP = f"""
    Callback.on_sanity_check_start {_validation_run()} Callback.on_sanity_check_end
    Callback.on_train_start on_train_start
    Callback.on_train_epoch_start on_train_epoch_start
    {TRAIN_BATCH} {TRAIN_BATCH}
    {_validation_run()}
    Callback.on_train_epoch_end on_train_epoch_end
    Callback.on_train_end on_train_end
    Callback.on_fit_end on_fit_end
    DataModule.teardown Callback.teardown teardown
"""
SETUP = "DataModule.prepare_data DataModule.setup Callback.setup setup"
RESTORE = "on_load_checkpoint DataModule.load_state_dict Callback.on_load_checkpoint Callback.load_state_dict"
EXPECTED = {
    "fit": f"{SETUP} configure_optimizers Callback.on_fit_start on_fit_start {FIT_LOOP}",
    "validate": f"{SETUP} {_validation_run()} DataModule.teardown Callback.teardown teardown",
    "test": f"""
        {SETUP} Callback.on_test_start on_test_start Callback.on_test_epoch_start on_test_epoch_start
        Callback.on_test_batch_start on_test_batch_start test_step Callback.on_test_batch_end on_test_batch_end
        Callback.on_test_batch_start on_test_batch_start test_step Callback.on_test_batch_end on_test_batch_end
        Callback.on_test_epoch_end on_test_epoch_end Callback.on_test_end on_test_end
        DataModule.teardown Callback.teardown teardown
    """,
    "predict": f"""
        {SETUP} Callback.on_predict_start on_predict_start Callback.on_predict_epoch_start on_predict_epoch_start
        Callback.on_predict_batch_start on_predict_batch_start predict_step
        Callback.on_predict_batch_end on_predict_batch_end
        Callback.on_predict_batch_start on_predict_batch_start predict_step
        Callback.on_predict_batch_end on_predict_batch_end
        Callback.on_predict_epoch_end on_predict_epoch_end Callback.on_predict_end on_predict_end
        DataModule.teardown Callback.teardown teardown
    """,
    # Callback states, the data module's, then the callbacks' on_save_checkpoint before the module's.
    "save_checkpoint": "Callback.state_dict DataModule.state_dict Callback.on_save_checkpoint on_save_checkpoint",
    # The module's on_load_checkpoint (before its weights load), the data module's state, every callback's
    # on_load_checkpoint, then their states; the sanity check runs in a resumed fit too.
    # Lightning calls configure_optimizers after RESTORE (a checkpoint that is not sharded).
    "fit_resumed": f"{SETUP} {RESTORE} configure_optimizers Callback.on_fit_start on_fit_start {FIT_LOOP}",
    "test_ckpt": f"""
        {SETUP} {RESTORE}
        Callback.on_test_start on_test_start Callback.on_test_epoch_start on_test_epoch_start
        Callback.on_test_batch_start on_test_batch_start test_step Callback.on_test_batch_end on_test_batch_end
        Callback.on_test_batch_start on_test_batch_start test_step Callback.on_test_batch_end on_test_batch_end
        Callback.on_test_epoch_end on_test_epoch_end Callback.on_test_end on_test_end
        DataModule.teardown Callback.teardown teardown
    """,
    # The callbacks' on_exception, then the data module's; no teardown hook after a failure.
    "exception": f"""
        {SETUP} configure_optimizers Callback.on_fit_start on_fit_start Callback.on_train_start on_train_start
        Callback.on_train_epoch_start on_train_epoch_start Callback.on_train_batch_start on_train_batch_start
        Callback.on_exception DataModule.on_exception
    """,
    # on_train_epoch_end: the other callbacks, the module, then the monitoring callbacks (EarlyStopping,
    # ModelCheckpoint) so that they see what the module logged there. Every other hook: callbacks, module.
    "fit_monitoring": """
        Callback.on_validation_epoch_end Callback2.on_validation_epoch_end on_validation_epoch_end
        Callback.on_validation_end EarlyStopping.on_validation_end Callback2.on_validation_end
        ModelCheckpoint.on_validation_end on_validation_end
        Callback.on_validation_epoch_end Callback2.on_validation_epoch_end on_validation_epoch_end
        Callback.on_validation_end EarlyStopping.on_validation_end Callback2.on_validation_end
        ModelCheckpoint.on_validation_end on_validation_end
        Callback.on_train_epoch_end Callback2.on_train_epoch_end on_train_epoch_end
        EarlyStopping.on_train_epoch_end ModelCheckpoint.on_train_epoch_end
    """,
    "fit_monitoring_no_val": """
        Callback.on_train_epoch_end Callback2.on_train_epoch_end on_train_epoch_end ModelCheckpoint.on_train_epoch_end
    """,
}


@pytest.mark.parametrize("case", list(EXPECTED))
def test_hook_order_is_lightnings(recorded, case):
    """fit_resumed included: a checkpoint that is not sharded restores the module and the callbacks
    before configure_optimizers, as Lightning 2.6.6 does (tests/trainer/test_resume_order.py)."""
    assert recorded[case] == EXPECTED[case].split()


class EpochEndMetrics(tm.Module):
    """What Lightning 2.6.6's callback_metrics hold at on_train_epoch_end (recorded there)."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)
        self.seen = {}

    def training_step(self, batch, batch_idx):
        self.log("a", float(batch_idx), on_step=True, on_epoch=True)
        self.log("b", float(batch_idx))
        return F.cross_entropy(self.layer(batch[0]), batch[1])

    def on_train_epoch_end(self):
        self.seen["module"] = {k: float(v) for k, v in self.trainer.callback_metrics.items()}
        self.log("c", 5.0)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Seen(tm.Callback):
    def on_train_epoch_end(self, trainer, module):
        module.seen["callback"] = {k: float(v) for k, v in trainer.callback_metrics.items()}


class SeenByCheckpoint(ModelCheckpoint):
    def on_train_epoch_end(self, trainer, module):
        module.seen["monitoring"] = {k: float(v) for k, v in trainer.callback_metrics.items()}
        super().on_train_epoch_end(trainer, module)


def test_train_epoch_end_hooks_read_the_epoch_values_and_monitoring_callbacks_what_the_module_logged(tmp_path):
    """Lightning 2.6.6, same program: callback and module {'a': 1.5, 'a_step': 3.0, 'b': 3.0,
    'a_epoch': 1.5}; the ModelCheckpoint after them also 'c': 5.0, logged by the module there."""
    g = torch.Generator().manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(8, 4, generator=g), torch.randint(0, 2, (8,), generator=g)), 2)
    module = EpochEndMetrics()
    callbacks = [Seen(), SeenByCheckpoint(dirpath=str(tmp_path), monitor="c", mode="max")]
    trainer(str(tmp_path), callbacks, limit_val_batches=0).fit(module, data)
    epoch_values = {"a": 1.5, "a_step": 3.0, "b": 3.0, "a_epoch": 1.5}
    assert module.seen["callback"] == module.seen["module"] == epoch_values
    assert module.seen["monitoring"] == {**epoch_values, "c": 5.0}
    assert callbacks[1].best_model_score == 5.0


def test_validation_epoch_values_are_in_callback_metrics_at_on_validation_epoch_end():
    """As in Lightning: what validation_step logged is in callback_metrics (the epoch's value) when
    on_validation_epoch_end runs, on the callbacks and the module; what that hook logs appears after
    it. The lists are what Lightning 2.6.6 recorded for the same program."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    import trainmesh as tm
    from helpers.models import quiet_trainer

    seen = []

    def snapshot(trainer):
        return {name: round(float(value), 5) for name, value in trainer.callback_metrics.items()}

    class Module(tm.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", self.layer(batch[0]).pow(2).mean())

        def on_validation_epoch_end(self):
            seen.append(("module.epoch_end", snapshot(self.trainer)))
            self.log("hook_metric", torch.tensor(float(self.current_epoch)))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class Reader(tm.Callback):
        def on_validation_epoch_end(self, trainer, module):
            seen.append(("cb.epoch_end", snapshot(trainer)))

        def on_validation_end(self, trainer, module):
            seen.append(("cb.end", snapshot(trainer)))

    torch.manual_seed(0)
    x = torch.randn(8, 2)
    module = Module()
    loader = DataLoader(TensorDataset(x), batch_size=4)
    quiet_trainer(max_epochs=2, num_sanity_val_steps=0, callbacks=[Reader()]).fit(module, loader, loader)
    assert seen == [
        ("cb.epoch_end", {"val_loss": 0.14747}),
        ("module.epoch_end", {"val_loss": 0.14747}),
        ("cb.end", {"val_loss": 0.14747, "hook_metric": 0.0}),
        ("cb.epoch_end", {"val_loss": 0.03697, "hook_metric": 0.0}),
        ("module.epoch_end", {"val_loss": 0.03697, "hook_metric": 0.0}),
        ("cb.end", {"val_loss": 0.03697, "hook_metric": 1.0}),
    ]
