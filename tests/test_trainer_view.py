"""The typed trainer side: the Trainer satisfies the view callbacks and the Module are typed
against (trainmesh/trainer_view.py), and the loop state (trainer/loop_state.py) is what fit
updates and what the Lightning-compatible ``trainer.*`` properties read."""

import inspect

import torch

import trainmesh as tm
from helpers.models import DropoutNet, loaders, quiet_trainer
from trainmesh.runtime_optimizer import inner_optimizer
from trainmesh.trainer.loop_state import LoopPosition, LoopState
from trainmesh.trainer_view import LoopProgress, RuntimeView, TrainerView


def _members(protocol: type) -> set[str]:
    """Every member a Protocol declares: attributes, properties and methods (not its machinery)."""
    names = set(getattr(protocol, "__annotations__", {}))
    names |= {name for name in vars(protocol) if not name.startswith("_")}
    return names


class _Seen(tm.Callback):
    """Records the object each hook receives and whether it satisfies the view."""

    def __init__(self):
        self.views = []

    def on_train_epoch_end(self, trainer, module):
        self.views.append((trainer, isinstance(trainer, TrainerView), module.trainer is trainer))


def _fitted(max_epochs=2):
    train, val = loaders()
    seen = _Seen()
    trainer = quiet_trainer(max_epochs=max_epochs, callbacks=[seen])
    trainer.fit(DropoutNet(), train, val)
    return trainer, seen


def test_the_trainer_satisfies_the_view_member_by_member():
    trainer, seen = _fitted(max_epochs=1)
    assert isinstance(trainer, TrainerView)
    assert seen.views and all(ok and same for _, ok, same in seen.views)
    assert all(view is trainer for view, _, _ in seen.views)
    members = _members(TrainerView)
    assert {"current_epoch", "global_step", "should_stop", "callback_metrics", "runtime", "save_checkpoint"} <= members
    missing = sorted(name for name in members if not hasattr(trainer, name))
    assert not missing, f"TrainerView members the Trainer lacks: {missing}"
    # Methods take the view's arguments, by the same names.
    for name in members:
        declared = inspect.getattr_static(TrainerView, name, None)
        if inspect.isfunction(declared):
            expected = list(inspect.signature(declared).parameters)[1:]
            assert list(inspect.signature(getattr(trainer, name)).parameters) == expected, name
    # The nested views: trainer.runtime and trainer.loop.
    assert isinstance(trainer.runtime, RuntimeView)
    assert not sorted(name for name in _members(RuntimeView) if not hasattr(trainer.runtime, name))
    assert isinstance(trainer.loop, LoopProgress) and isinstance(LoopPosition(), LoopProgress)


def test_fit_updates_the_loop_state_and_the_properties_read_it():
    trainer, _ = _fitted(max_epochs=2)
    state = trainer._state
    assert isinstance(state, LoopState)
    train, _ = loaders()
    assert state.current_epoch == 2 and state.global_step == 2 * len(train)
    assert state.num_training_batches == len(train) and state.stage == "fit"
    for name in (
        "current_epoch",
        "global_step",
        "should_stop",
        "sanity_checking",
        "num_training_batches",
        "val_loader_batches",
        "stage",
        "ckpt_path",
        "epoch_metrics",
        "loop",
        "lr_scheduler_configs",
        "model",
        "datamodule",
    ):
        assert getattr(trainer, name) is getattr(state, name), name
    assert trainer.lightning_module is state.module
    # Lightning's trainer.optimizers: the program's own objects, which the run steps through its wrappers
    assert [type(o) for o in trainer.optimizers] == [torch.optim.SGD]
    assert all(o is inner_optimizer(w) for o, w in zip(trainer.optimizers, state.optimizers, strict=True))
    # logged_metrics: what went to the loggers, with the step values read live (as Lightning's)
    assert trainer.logged_metrics.items() >= state.logged_metrics.items()
    assert "val_loss" in state.epoch_metrics
    # callback_metrics holds it in Lightning's dtype, float32 (tests/trainer/test_results_dtypes.py)
    assert float(trainer.callback_metrics["val_loss"]) == float(torch.tensor(state.epoch_metrics["val_loss"]).float())
    trainer.should_stop = True  # what EarlyStopping does: written into the state
    assert state.should_stop is True


class _WithTestStep(DropoutNet):
    def test_step(self, batch, batch_idx):  # trainer.test needs one, as Lightning's does
        return self.validation_step(batch, batch_idx)


def test_no_loop_function_sets_attributes_on_the_trainer():
    """The run's state lives in the loop state: fit, validate and test leave the Trainer's own
    attributes as its constructor set them."""
    train, val = loaders()
    trainer = quiet_trainer(max_epochs=1)
    before = set(vars(trainer))
    model = _WithTestStep()
    trainer.fit(model, train, val)
    trainer.validate(model, val, verbose=False)
    assert isinstance(trainer.callback_metrics["val_loss"], torch.Tensor)
    trainer.test(model, val, verbose=False)
    assert set(vars(trainer)) == before
