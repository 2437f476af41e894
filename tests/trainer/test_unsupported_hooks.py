"""Lightning hooks trainmesh never calls: defining one stops the run before anything runs, with the
hook, the class and what to use instead; and no name on the lists is ever called."""

import pytest
import torch
import torch.nn.functional as F

import trainmesh as tm
from helpers.models import loaders, quiet_trainer


class Plain(tm.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(16, 4)
        self.ran = []

    def setup(self, stage):
        self.ran.append(f"setup:{stage.value}")

    def forward(self, x):
        return self.layer(x)

    def training_step(self, batch, batch_idx):
        return F.cross_entropy(self(batch[0]), batch[1])

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", F.cross_entropy(self(batch[0]), batch[1]))

    def test_step(self, batch, batch_idx):
        self.log("test_loss", F.cross_entropy(self(batch[0]), batch[1]))

    def predict_step(self, batch, batch_idx):  # the default is forward(batch), as Lightning's: batch is a pair
        return self(batch[0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _lists():
    from trainmesh.trainer.unsupported_hooks import CALLBACK_HOOKS, MODULE_HOOKS

    return MODULE_HOOKS, CALLBACK_HOOKS


# Lightning hooks that ported programs override and trainmesh had no call for (the lists hold more).
MODULE_EXAMPLES = ["on_before_optimizer_setup"]  # the one module name left: no Lightning release defines it
# Lightning 1.x's callback hooks are called now (trainer/lightning1/legacy_hooks.py, tests/trainer/test_legacy_hooks.py);
# on_before_optimizer_setup is defined by no Lightning release.
CALLBACK_EXAMPLES = ["on_before_optimizer_setup"]


def _run(stage, trainer, module):
    train, val = loaders()
    if stage == "fit":
        trainer.fit(module, train, val)
    elif stage == "predict":
        trainer.predict(module, val)
    else:
        getattr(trainer, stage)(module, val)


@pytest.mark.parametrize("name", MODULE_EXAMPLES)
@pytest.mark.parametrize("stage", ["fit", "validate", "test", "predict"])
def test_a_module_defining_an_uncalled_hook_is_refused_before_anything_runs(stage, name):
    module = type("Ported", (Plain,), {name: lambda self, *args, **kwargs: None})()
    with pytest.raises(ValueError, match=rf"Ported\.{name}: .*never calls.*Instead: ") as raised:
        _run(stage, quiet_trainer(max_epochs=1), module)
    assert _lists()[0][name] in str(raised.value)
    assert module.ran == []  # refused before setup, the stage's first hook


@pytest.mark.parametrize("name", CALLBACK_EXAMPLES)
def test_a_callback_defining_an_uncalled_hook_is_refused(name):
    callback = type("PortedCallback", (tm.Callback,), {name: lambda self, *args: None})()
    module = Plain()
    with pytest.raises(ValueError, match=rf"PortedCallback\.{name}: .*Lightning callback hook.*Instead: "):
        _run("fit", quiet_trainer(max_epochs=1, callbacks=[callback]), module)
    assert module.ran == []


def test_every_listed_name_is_refused():
    from trainmesh.trainer.unsupported_hooks import refuse_uncalled_hooks

    module_hooks, callback_hooks = _lists()
    for name in module_hooks:
        with pytest.raises(ValueError, match=rf"\.{name}: {name} is a Lightning module hook"):
            refuse_uncalled_hooks(type("M", (Plain,), {name: lambda self: None})(), [])
    for name in callback_hooks:
        with pytest.raises(ValueError, match=rf"\.{name}: {name} is a Lightning callback hook"):
            refuse_uncalled_hooks(Plain(), [type("C", (tm.Callback,), {name: lambda self: None})()])
    refuse_uncalled_hooks(Plain(), [tm.Callback()])  # none defined: nothing refused


def test_no_listed_name_is_a_hook_trainmesh_defines_or_calls(monkeypatch, tmp_path):
    """With the guard off, a module and a callback defining every listed name go through fit (with
    validation and the sanity check), validate, test and predict: none of them is called."""
    module_hooks, callback_hooks = _lists()
    for name in module_hooks:
        assert not hasattr(tm.Module, name) and not hasattr(torch.nn.Module, name), name
    for name in callback_hooks:
        assert not hasattr(tm.Callback, name), name
    called = []

    def recorder(name):
        return lambda self, *args, **kwargs: called.append((type(self).__name__, name))

    monkeypatch.setattr("trainmesh.trainer.hooks.refuse_uncalled_hooks", lambda module, callbacks: None)
    module = type("Everything", (Plain,), {name: recorder(name) for name in module_hooks})()
    callback = type("EveryCallback", (tm.Callback,), {name: recorder(name) for name in callback_hooks})()
    trainer = quiet_trainer(
        max_epochs=2,
        callbacks=[callback],
        num_sanity_val_steps=1,
        log_every_n_steps=1,
        enable_checkpointing=True,
        default_root_dir=tmp_path,
    )
    for stage in ("fit", "validate", "test", "predict"):
        _run(stage, trainer, module)
    assert called == []
    # stage.value read above: Lightning passes TrainerFn (formatted "TrainerFn.FITTING"), its value the name
    assert module.ran == [f"setup:{stage}" for stage in ("fit", "validate", "test", "predict")]
