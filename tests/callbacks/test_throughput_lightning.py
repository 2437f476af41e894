"""Lightning 2.6's ``ThroughputMonitor(batch_size_fn, length_fn)``, by position, under Lightning
2.6.6 and trainmesh on the same program: the samples and items each framework counts per batch
from the program's functions (Lightning's logged ``train/samples`` / ``train/batches`` and
``train/lengths`` / ``train/samples``, trainmesh's ``samples_per_sec`` / ``batches_per_sec`` and
``tokens_per_sec`` / ``samples_per_sec`` over each window). The keys differ: trainmesh logs its own
``throughput/...`` figures."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

L = pytest.importorskip("lightning.pytorch")
import trainmesh as tm  # noqa: E402

ROWS_PER_BATCH = 4


def samples_of(batch) -> int:  # not the first tensor's size: the function is what counts
    return 3 * batch[0].shape[0]


def items_of(batch) -> int:
    return 7 * batch[0].shape[0]


def _run(framework, root, every=2):
    class Model(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    logged: list[dict[str, float]] = []

    class Recorder(framework.loggers.Logger):
        name, version = "recorder", 0
        save_dir = log_dir = str(root)  # trainmesh's Logger asks for log_dir (Lightning's may be None)

        def log_hyperparams(self, params, *args, **kwargs):
            pass

        def log_metrics(self, metrics, step=None):
            logged.append({k: float(v) for k, v in metrics.items()})

    torch.manual_seed(0)
    monitor = framework.callbacks.ThroughputMonitor(samples_of, items_of)  # Lightning's positions
    trainer = framework.Trainer(
        max_epochs=1,
        accelerator="cpu",
        logger=Recorder(),
        log_every_n_steps=every,
        callbacks=[monitor],
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    loader = DataLoader(TensorDataset(torch.randn(8 * ROWS_PER_BATCH, 4)), batch_size=ROWS_PER_BATCH)
    trainer.fit(Model(), loader)
    return logged


def test_log_every_n_steps_0_logs_no_throughput_as_lightning_s(tmp_path) -> None:
    # Lightning's should_update_logs is False at 0: the run trains and no figure is logged
    assert [row for row in _run(L, tmp_path / "lightning", every=0) if "train/samples" in row] == []
    assert [row for row in _run(tm, tmp_path / "trainmesh", every=0) if "throughput/samples_per_sec" in row] == []


def test_batch_size_fn_and_length_fn_count_as_lightning_s(tmp_path) -> None:
    theirs = [row for row in _run(L, tmp_path / "lightning") if "train/samples" in row]
    ours = [row for row in _run(tm, tmp_path / "trainmesh") if "throughput/samples_per_sec" in row]
    assert theirs and ours
    their_ratios = {
        (row["train/samples"] / row["train/batches"], row["train/lengths"] / row["train/samples"]) for row in theirs
    }
    our_ratios = {
        (
            round(row["throughput/samples_per_sec"] / row["throughput/batches_per_sec"], 9),
            round(row["throughput/tokens_per_sec"] / row["throughput/samples_per_sec"], 9),
        )
        for row in ours
    }
    assert {(round(a, 9), round(b, 9)) for a, b in their_ratios} == our_ratios == {(12.0, round(7 / 3, 9))}


def test_length_fn_and_tokens_in_batch_together_are_refused() -> None:
    with pytest.raises(ValueError, match="one of tokens_per_sample, tokens_in_batch and length_fn"):
        tm.callbacks.ThroughputMonitor(samples_of, items_of, tokens_in_batch=items_of)


def _train_with_a_progress_bar(framework) -> list[torch.Tensor]:
    class Energy(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            # SiLU's and Mish's backward: ops torch's FlopCounterMode runs through other arithmetic
            self.net = torch.nn.Sequential(
                torch.nn.Linear(16, 64),
                torch.nn.SiLU(),
                torch.nn.Linear(64, 64),
                torch.nn.Mish(),
                torch.nn.Linear(64, 1),
            )

        def training_step(self, batch, batch_idx):
            return self.net(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    model = Energy()
    loader = DataLoader(TensorDataset(torch.randn(3 * 32, 16)), batch_size=32)
    # The progress bar on: trainmesh's shows samples/s and counts the first step's FLOPs for it.
    trainer = framework.Trainer(
        max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False, enable_model_summary=False
    )
    trainer.fit(model, loader)
    return [parameter.detach().clone() for parameter in model.parameters()]


def test_the_bar_s_flop_count_leaves_the_weights_lightning_s() -> None:
    # Before: the counted first step ran silu_backward / mish_backward through torch's decompositions,
    # and the weights were Lightning's to 1e-8 but not bit for bit (UvA-DL 07: parameter sum 1e-6 off).
    theirs, ours = _train_with_a_progress_bar(L), _train_with_a_progress_bar(tm)
    assert all(torch.equal(their, our) for their, our in zip(theirs, ours, strict=True))


def _train_a_torch_compiled_part(framework) -> tuple[list[str], list[torch.Tensor]]:
    class Student(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.student = torch.nn.Linear(4, 1)

        def configure_model(self) -> None:  # as a distillation program compiles its student (l-progs9 p04)
            self.student = torch.compile(self.student, backend="eager")

        def training_step(self, batch, batch_idx):
            return self.student(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    model = Student()
    loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4)
    trainer = framework.Trainer(
        max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False, enable_model_summary=False
    )
    # dynamo's switch off: the compiled call runs eager at once (no tracing: the test stays cheap), after
    # OptimizedModule.__call__'s check for global module hooks, which a dispatch mode around it sets
    with warnings.catch_warnings(record=True) as caught, torch._dynamo.config.patch(disable=True):
        warnings.simplefilter("always")
        trainer.fit(model, loader)
    said = [str(w.message) for w in caught if "global hooks" in str(w.message)]
    return said, [parameter.detach().clone() for parameter in model.parameters()]


def test_the_bar_s_flop_count_leaves_a_torch_compiled_submodule_alone() -> None:
    # Before: the bar's first-step FLOP counter (a dispatch mode with global module hooks) ran around the
    # OptimizedModule torch.compile returned: torch warned "Using `torch.compile(module)` when there are
    # global hooks on modules" and the compiled (inductor) student trained 4e-5 away from Lightning's
    # (bf16-mixed, measured on the program; here the warning is the witness: no tracing, no inductor).
    theirs, ours = _train_a_torch_compiled_part(L), _train_a_torch_compiled_part(tm)
    assert theirs[0] == [] and ours[0] == theirs[0]
    assert all(torch.equal(their, our) for their, our in zip(theirs[1], ours[1], strict=True))
