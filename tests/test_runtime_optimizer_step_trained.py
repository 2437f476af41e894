"""The fast path's optimizer step without a closure (``runtime_optimizer.step_trained``), only where
nothing can tell it from Lightning 2.6's ``optimizer.step(closure=...)``: torch's own optimizers (a
step that calls the closure once and returns its value), no step hook, ``step`` not replaced but by
torch's scheduler. There the hook calls, metrics and weights are Lightning's bit for bit and the
closure is never called; a step hook, a ``step`` replaced on the optimizer, or a subclass's own
``step`` still receive the closure, as under Lightning."""

from __future__ import annotations

import sys

import pytest
import torch
import torch.optim.optimizer as torch_optimizer
from torch.utils.data import DataLoader, TensorDataset

from helpers.differential import Program, api, differences, run

pytest.importorskip("lightning.pytorch")

IGNORED_KEYS = ("loops", "pytorch-lightning_version", "epoch_metrics", "format", "hyper_parameters", "loop")
IGNORED_KEYS += ("per_rank", "precision", "rng", "train_results", "trainmesh_version", "trainmesh_run")


def _closure_calls(run_fit) -> int:
    """How often the fast path's closure (OptimizerSteps._step_loss) ran during ``run_fit()``."""
    calls = [0]

    def profiler(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "_step_loss":
            calls[0] += 1

    sys.setprofile(profiler)
    try:
        result = run_fit()
    finally:
        sys.setprofile(None)
    return calls[0], result


@pytest.mark.parametrize(
    ("optimizer", "scheduler"), [("sgd", None), ("adam", None), ("adam", "step")], ids=["sgd", "adam", "adam_steplr"]
)
def test_torch_optimizers_step_without_the_closure_as_lightning(tmp_path, optimizer, scheduler):
    program = Program(optimizer=optimizer, scheduler=scheduler)
    settings = dict(max_epochs=2, limit_train_batches=3, limit_val_batches=1, gradient_clip_val=0.5)
    theirs = run("lightning", program, tmp_path / "pl", **settings)
    closures, ours = _closure_calls(lambda: run("trainmesh", program, tmp_path / "tm", **settings))
    assert differences(ours, theirs, ignore_checkpoint_keys=IGNORED_KEYS) == {}
    assert ours.global_step == 6 and closures == 0


def _kwargs_seen(framework: str, how: str) -> list[list[str]]:
    """The names of the arguments each optimizer step received, as a step hook or a replaced
    ``step`` sees them, under ``framework``."""
    L = api(framework)
    seen: list[list[str]] = []

    class Net(L.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            if how == "hook":
                optimizer.register_step_pre_hook(lambda opt, args, kwargs: seen.append(sorted(kwargs)))
            elif how == "replaced":
                step = optimizer.step

                def recorded(*args, **kwargs):
                    seen.append(sorted(kwargs))
                    return step(*args, **kwargs)

                optimizer.step = recorded  # a user's own patch, as some programs do
            return optimizer

    options = dict(accelerator="cpu", max_epochs=1, logger=False, enable_progress_bar=False)
    trainer = L.Trainer(**options, enable_checkpointing=False, enable_model_summary=False)
    handle = None
    if how == "global_hook":
        handle = torch_optimizer.register_optimizer_step_pre_hook(lambda opt, args, kwargs: seen.append(sorted(kwargs)))
    try:
        trainer.fit(Net(), DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4))
    finally:
        if handle is not None:
            handle.remove()
    return seen


@pytest.mark.parametrize("how", ["hook", "global_hook", "replaced"])
def test_whoever_sees_the_step_s_arguments_still_gets_the_closure(how):
    theirs = _kwargs_seen("lightning", how)
    closures, ours = _closure_calls(lambda: _kwargs_seen("trainmesh", how))
    assert ours == theirs == [["closure"], ["closure"]]
    assert closures == 2  # the closure went to the step (and torch's SGD ran it), once a step


def test_only_torch_s_own_steps_go_without_it():
    from trainmesh.runtime_optimizer import _closure_once

    class OwnStep(torch.optim.Adam):  # Lightning's docs' LitAdam: it must get its closure
        def step(self, closure):
            return super().step(closure)

    class Renamed(torch.optim.AdamW):  # torch's step, inherited
        pass

    assert _closure_once(torch.optim.SGD) and _closure_once(torch.optim.Adam) and _closure_once(Renamed)
    assert not _closure_once(torch.optim.LBFGS) and not _closure_once(OwnStep)


def test_a_fit_called_under_no_grad_trains_as_lightning(tmp_path):
    """Lightning's fit loop enables grad (FitLoop.reset), and its closure too: a fit called inside
    ``torch.no_grad()`` trains. trainmesh's fast path trains outside any closure, in the fit's grad
    mode, which is now enabled the same way (before: "loss does not require grad")."""
    program, settings = Program(optimizer="adam"), dict(max_epochs=1, limit_train_batches=3, limit_val_batches=1)
    with torch.no_grad():
        theirs = run("lightning", program, tmp_path / "pl", **settings)
    with torch.no_grad():
        ours = run("trainmesh", program, tmp_path / "tm", **settings)
        assert not torch.is_grad_enabled()  # the caller's mode, back after the fit
    assert differences(ours, theirs, ignore_checkpoint_keys=IGNORED_KEYS) == {}
