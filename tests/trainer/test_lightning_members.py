"""Lightning 2.6's Trainer members and arguments that describe a run, measured against Lightning itself.

The same program (tests/helpers/trainer_members.py) runs under ``lightning.pytorch.Trainer`` and
``trainmesh.Trainer`` with the same arguments; its callback records, at each hook, what a program
reads of the Trainer (``num_devices``, ``device_ids``, ``num_nodes``, ``node_rank``,
``distributed_sampler_kwargs``, ``accelerator``, ``precision_plugin``, ``scaler``,
``checkpoint_callbacks``, ``early_stopping_callbacks``, ``progress_bar_callback``, ``interrupted``,
``received_sigterm``, ``is_last_batch``, ``num_sanity_val_batches``, ``enable_validation``,
``estimated_stepping_batches``, ``train_dataloader``, ``val_dataloaders``, ``test_dataloaders``,
``predict_dataloaders``, torch's anomaly mode and ``cudnn.benchmark``), and its module records when
each ``train_dataloader()``/``val_dataloader()`` is asked for and the samples of every training step.
Both records, and the trained weights (bit for bit), must be equal. ``estimated_stepping_batches``
is also read in ``configure_optimizers`` for a OneCycleLR, where Lightning asks for the train loader
early. The arguments covered: ``reload_dataloaders_every_n_epochs``, ``detect_anomaly``,
``benchmark``, ``barebones``, ``enable_autolog_hparams``.
"""

from __future__ import annotations

import io
from contextlib import redirect_stdout

import pytest
import torch

from helpers.trainer_members import run

pl = pytest.importorskip("lightning.pytorch")

CASES = {
    "all_stages": dict(max_epochs=2, limit_train_batches=3, limit_val_batches=2, stages=("fit", "test", "predict")),
    "onecycle_accumulate": dict(max_epochs=3, accumulate_grad_batches=3, onecycle=True, limit_val_batches=1),
    "onecycle_max_steps": dict(max_steps=5, onecycle=True, limit_val_batches=1),
    "onecycle_fraction_two_val_loaders": dict(
        max_epochs=2, limit_train_batches=0.5, onecycle=True, num_sanity_val_steps=5, val_loaders=2
    ),
    "stream_max_steps": dict(data="stream", max_steps=7, onecycle=True, limit_val_batches=1),
    "stream_epochs": dict(data="stream", max_epochs=1, limit_val_batches=1),
    "infinite_epochs_max_steps": dict(max_epochs=-1, max_steps=4, onecycle=True, limit_val_batches=1),
    "reload_every_epoch_shuffled": dict(
        max_epochs=3, limit_train_batches=2, limit_val_batches=1, reload_dataloaders_every_n_epochs=1, data="shuffle"
    ),
    "reload_every_2_val_every_3": dict(
        max_epochs=4,
        limit_train_batches=2,
        limit_val_batches=1,
        reload_dataloaders_every_n_epochs=2,
        check_val_every_n_epoch=3,
        data="shuffle",
    ),
    "reload_stream_read_ahead": dict(
        max_epochs=2, limit_val_batches=1, reload_dataloaders_every_n_epochs=1, data="stream"
    ),
    "detect_anomaly": dict(max_epochs=1, limit_train_batches=2, limit_val_batches=1, detect_anomaly=True),
    "benchmark": dict(max_epochs=1, limit_train_batches=2, limit_val_batches=1, benchmark=True),
    # deterministic=True without benchmark: Lightning turns cuDNN's autotuner off (it was on before the run)
    "deterministic_benchmark_default": dict(
        max_epochs=1, limit_train_batches=2, limit_val_batches=1, deterministic=True, benchmark_before=True
    ),
    "bf16_callbacks_progress_bar": dict(
        max_epochs=1,
        limit_train_batches=2,
        limit_val_batches=1,
        precision="bf16-mixed",
        callbacks=("checkpoint", "early_stopping"),
        enable_progress_bar=True,
    ),
    "double": dict(max_epochs=1, limit_train_batches=2, limit_val_batches=1, precision="64-true"),
    "barebones": dict(max_epochs=1, limit_train_batches=2, limit_val_batches=1, barebones=True),
}


@pytest.fixture
def torch_flags():
    """Each run starts from torch's defaults (benchmark and determinism are process-wide)."""
    saved = torch.backends.cudnn.benchmark, torch.are_deterministic_algorithms_enabled()
    yield
    torch.backends.cudnn.benchmark = saved[0]
    torch.use_deterministic_algorithms(saved[1])


def _run(framework, root, settings):
    settings = dict(settings)
    torch.backends.cudnn.benchmark = settings.pop("benchmark_before", False)
    torch.use_deterministic_algorithms(False)
    with redirect_stdout(io.StringIO()):
        return run(framework, root, **settings)


@pytest.mark.parametrize("case", list(CASES))
def test_members_read_as_lightnings(tmp_path, torch_flags, case):
    settings = dict(CASES[case])
    if settings.get("barebones"):
        # as passed to both: barebones refuses an explicit True, which run() would pass otherwise
        settings.update(enable_progress_bar=False)
    theirs = _run("lightning", tmp_path / "pl", settings)
    ours = _run("trainmesh", tmp_path / "tm", settings)
    assert ours["events"] == theirs["events"]
    assert ours["weights"].keys() == theirs["weights"].keys()
    assert all(torch.equal(ours["weights"][k], theirs["weights"][k]) for k in ours["weights"])


class _Initialized(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 3)
        torch.nn.init.constant_(self.layer.bias, 12345.0)


@pytest.mark.parametrize("precision", ["32-true", "bf16-true", "64-true"])
@pytest.mark.parametrize("empty_init", [None, True])
def test_init_module_as_lightnings(precision, empty_init):
    """The tensors made under ``trainer.init_module()``: their dtype and device, the seeded
    initial weights, and with ``empty_init=True`` ``torch.nn.init`` skipped (the bias not 12345)."""
    import trainmesh as tm

    made = {}
    for name, L in (("lightning", pl), ("trainmesh", tm)):
        trainer = L.Trainer(accelerator="cpu", devices=1, precision=precision, logger=False)
        torch.manual_seed(0)
        with trainer.init_module(empty_init=empty_init):
            net = _Initialized()
        bias_set = bool((net.layer.bias == 12345.0).all())
        weight = net.layer.weight.detach().clone() if not empty_init else None
        made[name] = (net.layer.weight.dtype, net.layer.weight.device, bias_set, torch.get_default_dtype(), weight)
    ours, theirs = made["trainmesh"], made["lightning"]
    assert ours[:4] == theirs[:4]
    assert (ours[4] is None and theirs[4] is None) or torch.equal(ours[4], theirs[4])


def test_print_on_local_rank_zero_as_lightnings(capsys):
    import trainmesh as tm

    printed = {}
    for name, L in (("lightning", pl), ("trainmesh", tm)):
        L.Trainer(accelerator="cpu", devices=1, logger=False).print("step", 3, sep="=", end="!\n")
        printed[name] = capsys.readouterr().out
    assert printed["trainmesh"] == printed["lightning"] == "step=3!\n"


def test_received_sigterm_read_as_lightnings(tmp_path):
    """SIGTERM during fit: ``trainer.received_sigterm`` turns True at once, as Lightning's (after
    it, Lightning raises its SIGTERMException and trainmesh saves a checkpoint and exits with
    status 75: both a SystemExit)."""
    import os
    import signal

    import trainmesh as tm
    from helpers.trainer_members import module

    read = {}
    previous = signal.signal(signal.SIGTERM, lambda *_: None)  # never the default (kill pytest)
    try:
        for name, L in (("lightning", pl), ("trainmesh", tm)):
            seen: list = []

            class Stop(L.Callback):
                def __init__(self, seen: list) -> None:
                    self.seen = seen

                def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
                    self.seen.append(trainer.received_sigterm)
                    if batch_idx == 1:
                        os.kill(os.getpid(), signal.SIGTERM)
                        self.seen.append(trainer.received_sigterm)

            trainer = L.Trainer(
                accelerator="cpu",
                devices=1,
                logger=False,
                enable_checkpointing=False,
                enable_progress_bar=False,
                enable_model_summary=False,
                max_epochs=1,
                limit_val_batches=0,
                default_root_dir=tmp_path / name,
                callbacks=[Stop(seen)],
            )
            with pytest.raises(SystemExit), redirect_stdout(io.StringIO()):
                trainer.fit(module(name, []))
            read[name] = seen
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert read["trainmesh"] == read["lightning"] == [False, False, True]


@pytest.mark.parametrize("steps", [-1, 0, 3])
def test_num_sanity_val_steps_reads_as_lightnings(steps):
    """``Trainer(num_sanity_val_steps=-1)`` reads back as ``inf`` (Lightning's "every batch"); before: -1.
    Setting it back (as the tuner does) keeps the run's meaning."""
    import trainmesh as tm

    ours = tm.Trainer(num_sanity_val_steps=steps, logger=False)
    theirs = pl.Trainer(num_sanity_val_steps=steps, logger=False, enable_progress_bar=False)
    assert ours.num_sanity_val_steps == theirs.num_sanity_val_steps
    assert type(ours.num_sanity_val_steps) is type(theirs.num_sanity_val_steps)
    ours.num_sanity_val_steps = theirs.num_sanity_val_steps
    assert ours.num_sanity_val_steps == theirs.num_sanity_val_steps
