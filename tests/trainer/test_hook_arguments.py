"""Hooks are called with the arguments their signatures ask for, built at the call site
(trainer/hook_arguments.py, trainer/lightning1/): a hook taking fewer arguments than the Trainer passes,
Lightning before 1.5's required ``dataloader_idx``, and Lightning 1.x's ``optimizer_idx`` / ``hiddens``
signatures, with nothing written onto the user's module, callbacks or their classes."""

import sys
import warnings
from pathlib import Path

import torch

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from optimizer_idx_run import Gan, Recorder  # noqa: E402
from optimizer_idx_run import data as gan_data  # noqa: E402
from tbptt_run import Rnn  # noqa: E402
from tbptt_run import data as rnn_data  # noqa: E402

import trainmesh as tm  # noqa: E402

# The Module's own slots a fit sets (Lightning's LightningModule holds its trainer too): not a hook.
# _hparams: the hparams store both owners' HyperparametersMixin creates on first read (Lightning's
# checkpoint dump reads model.hparams), kept when save_hyperparameters ran before the base __init__.
MODULE_OWN_STATE = {"_trainer", "_log_collector", "_hparams"}


class OldGan(Gan):
    """Lightning 1.x's GAN with hooks in the older and shorter signatures ported programs carry."""

    def on_train_batch_start(self, batch, batch_idx, dataloader_idx):  # before 1.5: no default
        self.calls.append(("on_train_batch_start", batch_idx, dataloader_idx))

    def validation_step(self, batch):  # fewer arguments than the Trainer passes
        self.calls.append(("validation_step", len(batch)))


class OldRecorder(Recorder):
    def on_train_batch_start(self, trainer, pl_module):
        self.module.calls.append(("cb.on_train_batch_start",))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx):
        self.module.calls.append(("cb.on_train_batch_end", batch_idx, dataloader_idx))


def _snapshot(obj):
    """The object's own entries (by identity) and every class dict along its MRO."""
    classes = {cls: dict(vars(cls)) for cls in type(obj).__mro__ if cls is not object}
    return dict(vars(obj)), classes


def _written(before, after):
    own_before, classes_before = before
    own_after, classes_after = after
    changed = {k for k in own_after if k not in own_before or own_after[k] is not own_before[k]}
    changed |= {
        f"{cls.__name__}.{k}" for cls, entries in classes_after.items() for k in set(entries) ^ set(classes_before[cls])
    }
    changed |= {
        f"{cls.__name__}.{k}"
        for cls, entries in classes_after.items()
        for k in entries.keys() & classes_before[cls].keys()
        if entries[k] is not classes_before[cls][k]
    }
    return changed


def _fit(module, callback, train, val=None, **settings):
    trainer = tm.Trainer(
        max_epochs=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        accelerator="cpu",
        callbacks=[callback],
        num_sanity_val_steps=0,
        gradient_clip_val=0.5,
        **settings,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # the 1.x deprecation lines (test_optimizer_idx.py)
        trainer.fit(module, train, val)
    return trainer


def test_a_lightning_1x_fit_writes_nothing_onto_the_module_the_callback_or_their_classes():
    """Every optimizer hook in its optimizer_idx signature, training_step once per optimizer, a pre-1.5
    on_train_batch_start, a validation_step(batch) and a callback's hooks with fewer and more arguments:
    each called with what it declares, and the module's, the callback's and their classes' entries unchanged
    but the Module's own trainer slots."""
    module = OldGan("plain")
    callback = OldRecorder(module)
    before = _snapshot(module), _snapshot(callback)
    val = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(4, 4), torch.randn(4, 3)), 2)
    trainer = _fit(module, callback, gan_data(), val, limit_train_batches=2)
    assert _written(before[0], _snapshot(module)) == MODULE_OWN_STATE
    assert _written(before[1], _snapshot(callback)) == set()
    # each hook got what it declares (1.x's optimizer_idx, dataloader_idx 0, the leading arguments only)
    calls = module.calls
    assert calls[:3] == [
        ("cb.on_train_batch_start",),
        ("on_train_batch_start", 0, 0),
        ("optimizer_step", 0, 0, False, False),
    ]
    assert ("training_step", 0, 1) in calls and ("backward", "Adam", 1) in calls
    assert ("cb.on_before_optimizer_step", 1) in calls and ("lr_scheduler_step", 0) in calls
    assert ("cb.on_train_batch_end", 1, 0) in calls and calls.count(("validation_step", 2)) == 2
    assert trainer.global_step == 4  # two optimizer steps per batch


def test_a_truncated_bptt_fit_writes_nothing_onto_the_module_or_its_class():
    """training_step(batch, batch_idx, hiddens): the hidden state reaches it per split, never through the module."""
    module = Rnn("plain")
    callback = tm.Callback()
    before = _snapshot(module)
    trainer = _fit(module, callback, rnn_data(), limit_train_batches=2)
    assert _written(before, _snapshot(module)) == MODULE_OWN_STATE
    assert [call[3] for call in module.calls if call[0] == "training_step"] == [True, False, False] * 2
    assert trainer.global_step == 6  # a step per split


def test_a_hook_s_caller_is_read_from_its_signature_once_per_function():
    from trainmesh.trainer.hook_arguments import LeadingArgs, WithDataloaderIdx, hook_caller

    class Net:
        def training_step(self, batch):
            return batch

        def on_train_batch_end(self, outputs, batch, batch_idx, dataloader_idx):
            return dataloader_idx

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            return batch

    net = Net()
    step = hook_caller(net, "training_step")
    assert isinstance(step, LeadingArgs) and step(net.training_step, "b", 0) == "b"
    assert step is hook_caller(Net(), "training_step")  # cached per function, shared by the instances
    end = hook_caller(net, "on_train_batch_end")
    assert isinstance(end, WithDataloaderIdx) and end(net.on_train_batch_end, None, "b", 3) == 0
    assert hook_caller(net, "validation_step") is None  # takes everything the Trainer passes: called as it is
    assert hook_caller(net, "configure_optimizers") is None  # not a batch hook
    net.training_step = lambda *args: args  # an instance's own attribute: called as it is
    assert hook_caller(net, "training_step") is None


def test_a_class_is_scanned_once_for_a_hook_and_again_when_the_hook_is_replaced(monkeypatch):
    # Each fit asks of the module's and callbacks' classes which hooks they define: the MRO walk
    # of inspect.getattr_static was ~200 Python calls of a tiny fit's fixed cost.
    import inspect

    from trainmesh.trainer.hook_arguments import class_function

    scans = []
    real = inspect.getattr_static
    monkeypatch.setattr(inspect, "getattr_static", lambda *args: scans.append(args) or real(*args))

    class Net:
        def training_step(self, batch):
            return batch

    first = class_function(Net(), "training_step")
    assert class_function(Net(), "training_step") is first is Net.training_step
    assert len(scans) == 1

    def training_step(self, batch, batch_idx):
        return batch_idx

    monkeypatch.setattr(Net, "training_step", training_step)
    assert class_function(Net(), "training_step") is training_step
    net = Net()
    net.training_step = print  # the instance's own: called as is
    assert class_function(net, "training_step") is None
