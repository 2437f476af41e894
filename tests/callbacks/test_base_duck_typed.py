"""Callbacks written for Lightning by other libraries: taken by their methods (callbacks/base.py's
``defines_hook``, trainer/construction.py), as long as they define no hook trainmesh cannot honour.

``PruningCallback`` imitates Optuna's PyTorchLightningPruningCallback: it subclasses Lightning's
Callback (here ``LightningStyleBase``, whose every hook has an empty body, as
lightning.pytorch.Callback's do), reads ``trainer.callback_metrics`` in on_validation_end, reports
to the trial and raises when the trial is pruned; its Lightning 1.x versions checked the Trainer in
``on_init_start`` (a hook Lightning removed: not called, said once).
"""

import warnings

import pytest
import torch
import torch.nn.functional as F

import trainmesh as tm
from helpers.models import DropoutNet, loaders, quiet_trainer


class LightningStyleBase:
    """Not a trainmesh Callback: a base class with Lightning's hooks, each empty."""

    @property
    def state_key(self):
        return type(self).__qualname__

    def on_init_start(self, trainer):
        """Called when the trainer initialization begins."""

    def on_epoch_start(self, trainer, pl_module):
        """Called when either of train/val/test epoch begins."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        """Called when the train batch ends."""

    def on_validation_end(self, trainer, pl_module):
        """Called when the validation loop ends."""

    def on_exception(self, trainer, pl_module, exception):
        pass

    def state_dict(self):
        return {}

    def load_state_dict(self, state_dict):
        pass


class TrialPruned(Exception):
    pass


class Trial:
    def __init__(self, prune_at):
        self.prune_at, self.reports = prune_at, []

    def report(self, value, step):
        self.reports.append((step, value))

    def should_prune(self):
        return self.reports[-1][0] >= self.prune_at


class PruningCallback(LightningStyleBase):
    def __init__(self, trial, monitor):
        self._trial, self.monitor = trial, monitor
        self.init_trainer = None

    def on_init_start(self, trainer):
        self.init_trainer = trainer

    def on_validation_end(self, trainer, pl_module):
        if trainer.sanity_checking:
            return
        current_score = trainer.callback_metrics.get(self.monitor)
        if current_score is None:
            return
        epoch = pl_module.current_epoch
        if trainer.is_global_zero:
            self._trial.report(current_score.item(), step=epoch)
            if self._trial.should_prune():
                raise TrialPruned(f"Trial was pruned at epoch {epoch}.")


class Validated(DropoutNet):
    def __init__(self):
        super().__init__()
        self.val_losses = []

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", F.cross_entropy(self.net(batch[0]), batch[1]))

    def on_validation_end(self):  # runs after the callbacks' on_validation_end (Lightning's order)
        if not self.trainer.sanity_checking:
            self.val_losses.append(float(self.trainer.callback_metrics["val_loss"]))


def test_a_pruning_callback_from_another_library_reports_and_prunes():
    trial = Trial(prune_at=1)
    callback = PruningCallback(trial, monitor="val_loss")
    trainer = quiet_trainer(max_epochs=5, callbacks=callback, limit_train_batches=2, num_sanity_val_steps=1)
    assert trainer.callbacks == [callback]
    module = Validated()
    with pytest.warns(UserWarning, match=r"PruningCallback\.on_init_start is not called") as caught:
        with pytest.raises(TrialPruned, match="pruned at epoch 1"):
            trainer.fit(module, *loaders())
    # on_init_start, a hook Lightning 1.8 removed, runs neither under Lightning 2.x nor here (said once)
    assert callback.init_trainer is None
    # It read each epoch's validation loss (the module, after it, saw the same), and pruned at epoch 1,
    # before the module's on_validation_end: the callbacks' hook runs first.
    assert [step for step, _ in trial.reports] == [0, 1]
    assert trial.reports[0][1] == module.val_losses[0] and len(module.val_losses) == 1
    assert trainer.current_epoch == 1
    # The base class's empty hooks are neither called nor warned about: only on_init_start was named.
    named = [str(w.message).split(" ")[0] for w in caught if "is not called" in str(w.message)]
    assert named == ["PruningCallback.on_init_start"]
    hooks = trainer.hooks
    assert hooks.callbacks_for("on_validation_end") == [callback]
    assert hooks.callbacks_for("on_train_batch_end") == hooks.callbacks_for("on_epoch_start") == []


class Counter(LightningStyleBase):
    """Duck typed, with a state but no Callback base: saved in checkpoints, restored on resume."""

    def __init__(self):
        self.batches = 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.batches += 1

    def state_dict(self):
        return {"batches": self.batches}

    def load_state_dict(self, state_dict):
        self.batches = state_dict["batches"]


class Bare:
    """No base class at all: one hook method, no state_key, no state_dict."""

    def __init__(self):
        self.starts = 0

    def on_train_epoch_start(self, trainer, module):
        self.starts += 1


def test_duck_typed_callbacks_take_part_in_checkpoints(tmp_path):
    counter, bare = Counter(), Bare()
    trainer = quiet_trainer(
        max_epochs=1, callbacks=[counter, bare], enable_checkpointing=True, default_root_dir=tmp_path
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # nothing of Lightning 1.x is defined here
        trainer.fit(DropoutNet(), loaders()[0])
    assert counter.batches == 12 and bare.starts == 1
    checkpoint = torch.load(trainer.checkpoint_callback.best_model_path, weights_only=False)
    assert checkpoint["callbacks"]["Counter"] == {"batches": 12}
    resumed = Counter()
    quiet_trainer(max_epochs=2, callbacks=[resumed, Bare()], default_root_dir=tmp_path).fit(
        DropoutNet(), loaders()[0], ckpt_path=trainer.checkpoint_callback.best_model_path
    )
    assert resumed.batches == 24


@pytest.mark.parametrize("given", [object(), "ModelCheckpoint", torch.nn.Linear(2, 2)])
def test_an_object_with_no_callback_hook_is_refused(given):
    with pytest.raises(TypeError, match=r"is not a callback: .* none of the callback hook methods"):
        quiet_trainer(callbacks=[given])


class UnknownHook(LightningStyleBase):
    def on_before_optimizer_setup(self, trainer, pl_module):
        pl_module.frozen = True


def test_a_duck_typed_callback_defining_a_hook_trainmesh_cannot_honour_is_refused():
    with pytest.raises(ValueError, match=r"UnknownHook\.on_before_optimizer_setup: .*no Lightning version defines"):
        quiet_trainer(max_epochs=1, callbacks=[UnknownHook()]).fit(DropoutNet(), loaders()[0])


class Noop(tm.Callback):
    pass


def test_defines_hook():
    from trainmesh.callbacks.base import defines_hook

    assert not defines_hook(Noop(), "on_train_start")  # trainmesh's own base: what is overridden
    assert defines_hook(PruningCallback(None, "x"), "on_validation_end")
    assert not defines_hook(PruningCallback(None, "x"), "on_train_batch_end")  # the base's empty body
    assert not defines_hook(PruningCallback(None, "x"), "on_exception")  # `pass`
    assert defines_hook(Counter(), "on_train_batch_end") and not defines_hook(Bare(), "on_fit_start")
