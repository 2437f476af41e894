"""A hook the instance holds (``functools.partial`` / ``functools.wraps`` around its own bound method, a
lambda) is called as Lightning 2.6 calls it: ``on_predict_epoch_end`` without Lightning 1.x's predictions
argument. Before, trainmesh passed them to any hook not defined on the class, and a callback whose hooks
were wrapped per instance (Lightning's own models/test_hooks.py::test_trainer_model_hook_system_predict)
stopped predict with "on_predict_epoch_end() takes 3 positional arguments but 4 were given"."""

import functools
import importlib
import warnings

import pytest
import torch
from torch.utils.data import DataLoader

pl = pytest.importorskip("lightning.pytorch")
FRAMEWORKS = {"lightning": pl, "trainmesh": importlib.import_module("trainmesh")}


def _recorded(framework, calls):
    """Record the instance-wrapped epoch-end hooks of a module and a callback (as test_hooks.py wraps them)."""

    def wrap(owner, name, label):
        method = getattr(owner, name)

        @functools.wraps(method)
        def recorder(*args):
            calls.append((label, len(args)))
            return method(*args)

        setattr(owner, name, recorder)

    class Net(framework.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)
            wrap(self, "on_predict_epoch_end", "module")
            self.on_predict_epoch_start = lambda *args: calls.append(("module start", len(args)))

        def predict_step(self, batch, batch_idx):
            return self.layer(batch)

    class Recorder(framework.Callback):
        def __init__(self):
            wrap(self, "on_predict_epoch_end", "callback")
            self.on_predict_end = functools.partial(lambda *args: calls.append(("callback end", len(args))))

    return Net(), Recorder()


def _predict(name):
    framework = FRAMEWORKS[name]
    calls = []
    module, callback = _recorded(framework, calls)
    trainer = framework.Trainer(
        accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False, callbacks=[callback]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        predictions = trainer.predict(module, DataLoader(torch.randn(4, 2), batch_size=2))
    return calls, [p.shape for p in predictions]


def test_instance_held_epoch_end_hooks_get_lightning_2_arguments():
    lightning, trainmesh = _predict("lightning"), _predict("trainmesh")
    assert lightning == ([("module start", 0), ("callback", 2), ("module", 0), ("callback end", 2)], [(2, 1), (2, 1)])
    assert trainmesh == lightning


def _held_steps(name):
    """Step hooks set per instance (``functools.partial(self._step, stage=...)``, a lambda): Lightning reads each
    one's signature as a method's (first parameter skipped) and passes ``batch_idx`` only where it is named there,
    or two parameters follow the first (ContrastivePretrainingModel, stored file 10785753000)."""
    framework = FRAMEWORKS[name]
    calls = []

    class Net(framework.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)
            for stage in ("training", "test", "predict"):
                setattr(self, f"{stage}_step", functools.partial(self._step, stage=stage))
            self.validation_step = lambda batch, batch_idx: calls.append(("validation", batch_idx))

        def _step(self, batch, stage):
            calls.append((stage, batch.shape[0]))
            return self.layer(batch).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    loader = DataLoader(torch.randn(4, 2), batch_size=2)
    kwargs = dict(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    trainer = framework.Trainer(max_epochs=1, enable_checkpointing=False, num_sanity_val_steps=0, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net = Net()
        trainer.fit(net, loader, loader)
        trainer.test(net, loader, verbose=False)
        trainer.predict(net, loader)
    return calls, net.layer.weight.tolist()


def test_instance_held_step_hooks_get_batch_idx_as_lightning_reads_their_signature():
    lightning, trainmesh = _held_steps("lightning"), _held_steps("trainmesh")
    assert (
        lightning[0]
        == [("training", 2)] * 2 + [("validation", 0), ("validation", 1)] + [("test", 2)] * 2 + [("predict", 2)] * 2
    )
    assert trainmesh == lightning
