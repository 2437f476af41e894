"""``training_step`` returning None in automatic optimization (the UvA meta-learning tutorial's
ProtoMAML), against Lightning 2.6 (loops/optimization/automatic.py): on one process the batch's
backward is skipped (the window's zero_grad still runs), the optimizer still steps and counts in
``global_step``, ``on_before_optimizer_step`` and clipping still run, ``on_train_batch_end`` gets
``{}``, and Lightning's warning comes once per process; a dict whose ``loss`` is missing or None is
an error; on several processes it is Lightning's RuntimeError."""

from __future__ import annotations

import warnings

import pytest
import torch

from helpers.differential import Program, differences, make_trainer, module_class, run

pytest.importorskip("lightning.pytorch")

IGNORED_KEYS = ("loops", "pytorch-lightning_version", "epoch_metrics", "format", "hyper_parameters", "loop")
IGNORED_KEYS += ("per_rank", "precision", "rng", "train_results", "trainmesh_version", "trainmesh_run")

CASES = {
    # the first batch and one mid-epoch, each epoch
    "sgd": (Program(none_at=(0, 4)), dict(max_epochs=2, limit_val_batches=1)),
    # Adam keeps a step count per parameter: a step without gradients must leave it alone
    "adam_clipping": (Program(none_at=(2, 5), optimizer="adam"), dict(max_epochs=1, gradient_clip_val=0.05)),
    # accumulation: None at a window's first batch (zero_grad still runs) and at its stepping batch
    "accumulate": (
        Program(none_at=(0, 3, 5)),
        dict(max_epochs=1, accumulate_grad_batches=2, log_every_n_steps=1, limit_val_batches=1),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_training_step_returning_none_trains_as_lightning(tmp_path, case):
    program, settings = CASES[case]
    theirs = run("lightning", program, tmp_path / "pl", **settings)
    ours = run("trainmesh", program, tmp_path / "tm", **settings)
    assert differences(ours, theirs, ignore_checkpoint_keys=IGNORED_KEYS) == {}
    # What was compared: the skipped batches reached on_train_batch_end with {}, and still stepped
    skipped = [i for i, (keys, _) in enumerate(ours.batch_outputs) if keys == []]
    assert len(skipped) == len(program.none_at) * settings["max_epochs"]
    if settings.get("accumulate_grad_batches") is None:
        assert ours.global_step == len(ours.batch_outputs)
    assert "on_before_backward" in ours.calls and "on_before_optimizer_step" in ours.calls


def _fit_warnings(framework, tmp_path, fits=2):
    """The warnings about training_step that ``fits`` fits in this process give."""
    if framework == "lightning":
        from lightning.pytorch.loops.optimization.automatic import Closure

        Closure.warning_cache.clear()  # Lightning's once-per-process cache, as a fresh process has it
    else:
        from trainmesh.trainer.optimization import step_hooks

        step_hooks._SKIPPED_WARNINGS.clear()
    program = Program(none_at=(1,))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for index in range(fits):
            trainer = make_trainer(
                framework, tmp_path / f"{framework}{index}", program, [], max_epochs=1, limit_train_batches=3
            )
            trainer.fit(module_class(_base(framework), program)())
    return [str(w.message) for w in caught if "training_step" in str(w.message)]


def _base(framework):
    if framework == "lightning":
        import lightning.pytorch as pl

        return pl.LightningModule
    import trainmesh as tm

    return tm.Module


def test_the_warning_is_lightnings_once_per_process(tmp_path):
    theirs = _fit_warnings("lightning", tmp_path)
    ours = _fit_warnings("trainmesh", tmp_path)
    assert ours == theirs == ["`training_step` returned `None`. If this was on purpose, ignore this warning..."]


@pytest.mark.parametrize("output", [{"loss": None}, {"total": 1.0}], ids=["loss_none", "no_loss_key"])
def test_a_dict_without_a_loss_is_an_error_as_in_lightning(tmp_path, output):
    for framework in ("lightning", "trainmesh"):

        class Returns(module_class(_base(framework), Program())):
            def training_step(self, batch, batch_idx):
                super().training_step(batch, batch_idx)
                return output

        trainer = make_trainer(framework, tmp_path / framework, Program(), [], max_epochs=1, limit_train_batches=2)
        with pytest.raises(Exception, match="loss"):
            trainer.fit(Returns())


def test_through_optimizer_step_the_closure_gives_none_as_lightnings(tmp_path):
    """A module's own optimizer_step (Lightning's closure route): the closure of a skipped batch
    returns None, as Lightning's; the weights are Lightning's."""
    program, got = Program(none_at=(1, 2)), {}
    for framework in ("lightning", "trainmesh"):

        class OwnStep(module_class(_base(framework), program)):
            returned: list = []

            def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
                result = optimizer.step(closure=optimizer_closure)
                self.returned.append(None if result is None else round(float(result), 6))

        torch.manual_seed(0)
        model = OwnStep()
        make_trainer(framework, tmp_path / framework, program, [], max_epochs=1, limit_train_batches=4).fit(model)
        got[framework] = (model.returned, {k: v.clone() for k, v in model.state_dict().items()})
    (ours, our_weights), (theirs, their_weights) = got["trainmesh"], got["lightning"]
    assert ours == theirs and ours[1] is None and ours[0] is not None
    assert all(torch.equal(our_weights[k], their_weights[k]) for k in their_weights)


# Two ddp processes; rank 1 returns None at batch 1.
DDP_NONE = """
import torch
import trainmesh as tm


class M(tm.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        if batch_idx == 1 and self.global_rank == 1:
            return None
        return self.l(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(16, 2)), batch_size=2)
trainer = tm.Trainer(accelerator="cpu", strategy="ddp", devices=2, max_epochs=1, logger=False,
                     enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False)
trainer.fit(M(), data)
print("FIT ENDED")
"""


@pytest.mark.slow
def test_under_ddp_one_rank_returning_none_ends_the_run_with_lightnings_error(tmp_path):
    """Lightning raises on the rank that returned None; the other rank, waiting in backward's
    all-reduce, is stopped: the run ends (no hang) with the error. The program's two ranks run as
    forks (helpers/forked.py, ddp_fork's process group): what is checked is what training does on
    a rank, not how ranks start (the agent's start and exit are tests/launchers'; the ``[rankN]:``
    prefix a real worker prints is torch's own exception hook, which a fork's launcher pre-empts)."""
    import os

    from helpers.forked import run_forked

    launched = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")
    launched += ("TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE", "SLURM_NTASKS", "SLURM_PROCID")
    program = tmp_path / "ddp_none.py"
    program.write_text(DDP_NONE)
    environment = {**{k: v for k, v in os.environ.items() if k not in launched}, "OMP_NUM_THREADS": "1"}
    done = run_forked(program, [], env=environment, timeout=240, cwd=tmp_path, world=2)
    output = done.stdout + done.stderr
    assert done.returncode != 0 and "FIT ENDED" not in output, output[-3000:]
    assert "RuntimeError: Skipping the `training_step` by returning None in distributed training" in output


def test_on_several_processes_it_is_lightnings_error():
    from trainmesh.trainer.optimization.step_hooks import _OutputReader

    with pytest.raises(RuntimeError, match=r"Skipping the `training_step` by returning None in distributed training"):
        _OutputReader(torch.nn.Linear(1, 1), processes=2).loss_of(None)
