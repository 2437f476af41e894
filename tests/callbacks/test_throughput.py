import csv
import io
import time
from types import SimpleNamespace

import pytest
import torch
from rich.console import Console
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from helpers.models import quiet_trainer
from trainmesh.callbacks import ThroughputMonitor, throughput
from trainmesh.callbacks.progress import DrawingProgressBar
from trainmesh.callbacks.throughput import peak_flops_for, throughput_figures
from trainmesh.loggers import CSVLogger
from trainmesh.strategies.mesh import ParallelDims
from trainmesh.strategies.model_parallel_support import model_parallel_capabilities

B, IN, OUT = 4, 8, 3


class LinearNet(tm.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(IN, OUT)

    def training_step(self, batch, batch_idx):
        # The input asks for its gradient, so backward runs both matmuls: 2x the forward's FLOPs.
        x = batch[0].clone().requires_grad_()
        return self.layer(x).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def linear_loader(batches: int = 5) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(B * batches, IN, generator=g)), batch_size=B)


def test_flops_of_a_linear_layer_are_counted_once_and_change_no_weights(tmp_path):
    peak = 1e6
    monitor = ThroughputMonitor(peak_flops=peak)
    trainer = quiet_trainer(max_epochs=1, callbacks=[monitor], logger=CSVLogger(tmp_path), log_every_n_steps=1)
    counted = LinearNet()
    trainer.fit(counted, linear_loader())
    assert monitor.flops_per_batch == 3 * (2 * B * IN * OUT)  # forward 2*B*in*out, backward twice that

    plain = LinearNet()
    quiet_trainer(max_epochs=1).fit(plain, linear_loader())
    assert torch.equal(counted.layer.weight, plain.layer.weight), "counting FLOPs changed the training"

    # The CSV logger received every window's figures (the counted first step opens no window).
    with open(f"{trainer.log_dir}/metrics.csv") as handle:
        rows = [row for row in csv.DictReader(handle) if row.get("throughput/samples_per_sec")]
    assert [int(row["step"]) for row in rows] == [2, 3, 4, 5]
    for row in rows:
        samples, batches = float(row["throughput/samples_per_sec"]), float(row["throughput/batches_per_sec"])
        flops, mfu = float(row["throughput/flops_per_sec"]), float(row["throughput/mfu"])
        assert samples == pytest.approx(B * batches)
        assert flops == pytest.approx(monitor.flops_per_batch * batches)
        assert mfu == pytest.approx(flops / peak)
        assert 0 <= float(row["throughput/data_wait_share"]) < 1
        assert float(row["throughput/peak_memory_mb"]) > 0  # peak RSS of this process
        assert not row.get("throughput/tokens_per_sec"), "float inputs are not tokens"


def test_figures_are_the_arithmetic_of_the_recorded_times(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(throughput.time, "perf_counter", lambda: now[0])
    logged = []
    logger = SimpleNamespace(log_metrics=lambda metrics, step: logged.append((step, metrics)))
    loop = SimpleNamespace(data_seconds=0.0, batches_done=0)  # the fit loop times the waits for batches
    trainer = SimpleNamespace(
        global_step=0,
        log_every_n_steps=2,
        is_global_zero=True,
        sanity_checking=False,
        loggers=[logger],
        runtime=SimpleNamespace(device=torch.device("cpu")),
        model=None,
        precision="32-true",
        loop=loop,
    )
    monitor = ThroughputMonitor(count_flops=False, tokens_per_sample=10)
    batch = (torch.zeros(B, IN), torch.zeros(B))
    monitor.on_train_start(trainer, None)
    monitor.on_train_epoch_start(trainer, None)
    for _start, end, validation in ((1.0, 4.0, None), (5.0, 10.0, (7.0, 9.0))):
        loop.data_seconds += 1.0  # each batch waited for: 0-1 and 4-5
        trainer.global_step += 1
        if validation:  # validation runs inside the step, before the batch's end hooks
            now[0] = validation[0]
            monitor.on_validation_start(trainer, None)
            now[0] = validation[1]
            monitor.on_validation_end(trainer, None)
        now[0] = end
        monitor.on_train_batch_end(trainer, None, None, batch, 0)
    # 10 s elapsed less 2 s of validation = 8 s, 2 of them waiting for data.
    assert len(logged) == 1 and logged[0][0] == 2
    metrics = logged[0][1]
    assert metrics["throughput/batches_per_sec"] == 2 / 8
    assert metrics["throughput/samples_per_sec"] == 2 * B / 8
    assert metrics["throughput/tokens_per_sec"] == 2 * B * 10 / 8
    assert metrics["throughput/data_wait_share"] == 2 / 8
    assert "throughput/mfu" not in metrics and "throughput/flops_per_sec" not in metrics  # CPU, nothing given


def test_the_fit_loop_times_the_wait_for_each_batch(tmp_path):
    class SlowLoader:
        """Five batches, each 30 ms in coming."""

        def __init__(self) -> None:
            self.data = linear_loader()

        def __len__(self) -> int:
            return len(self.data)

        def __iter__(self):
            for batch in self.data:
                time.sleep(0.03)
                yield batch

    monitor = ThroughputMonitor(count_flops=False)
    trainer = quiet_trainer(max_epochs=1, callbacks=[monitor], log_every_n_steps=5)
    trainer.fit(LinearNet(), SlowLoader())
    assert trainer.loop.data_seconds >= 5 * 0.03
    (figures,) = monitor.history  # one window: steps 1-5
    assert figures["data_wait_share"] > 0.5, "the loader's 30 ms per batch is most of each step"


def test_throughput_figures_and_mfu_arithmetic():
    figures = throughput_figures(
        seconds=4.0,
        data_seconds=1.0,
        batches=8,
        samples=256,
        tokens=256 * 128,
        flops_per_batch=10**12,
        peak_flops=989.4e12,
    )
    assert figures["batches_per_sec"] == 2.0
    assert figures["samples_per_sec"] == 64.0
    assert figures["tokens_per_sec"] == 64.0 * 128
    assert figures["flops_per_sec"] == 2e12
    assert figures["mfu"] == pytest.approx(2e12 / 989.4e12)
    assert figures["data_wait_share"] == 0.25
    assert peak_flops_for("NVIDIA H100 80GB HBM3", "bf16-mixed") == 989.4e12
    assert peak_flops_for("NVIDIA H100 PCIe", "16-mixed") == 756.5e12
    assert peak_flops_for("NVIDIA A100-SXM4-40GB", "32-true") == 19.5e12
    assert peak_flops_for("Tesla V100-SXM2-16GB", "bf16-mixed") is None  # no bf16 units
    assert peak_flops_for("NVIDIA L4", "bf16-true") == 121e12


def test_integer_batches_of_shape_b_t_count_b_times_t_tokens():
    T = 7
    tokens = torch.randint(0, 50, (B * 3, T))

    class Embedder(tm.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(50, 4)

        def training_step(self, batch, batch_idx):
            return self.embed(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    monitor = ThroughputMonitor(count_flops=False)
    given = ThroughputMonitor(count_flops=False, tokens_in_batch=lambda batch: 5)
    quiet_trainer(max_epochs=1, callbacks=[monitor, given], log_every_n_steps=1).fit(
        Embedder(), DataLoader(TensorDataset(tokens), batch_size=B)
    )
    assert monitor.history and given.history
    for figures in monitor.history:
        assert figures["tokens_per_sec"] == pytest.approx(T * figures["samples_per_sec"])
    for figures in given.history:
        assert figures["tokens_per_sec"] == pytest.approx(5 * figures["batches_per_sec"])


def test_a_trainer_with_a_progress_bar_reports_throughput_on_the_bar():
    console = Console(file=io.StringIO(), width=200)
    bar = DrawingProgressBar(console=console)
    trainer = quiet_trainer(max_epochs=1, callbacks=[bar], enable_progress_bar=True, log_every_n_steps=1)
    # the bar owns its monitor: trainer.callbacks lists what Lightning's lists (test_differential_callbacks.py)
    assert [type(cb).__name__ for cb in trainer.callbacks] == ["DrawingProgressBar"]
    trainer.fit(LinearNet(), linear_loader())
    assert "samples/s=" in console.file.getvalue()
    assert isinstance(bar._meter, ThroughputMonitor) and bar._meter.history, "the bar's monitor measured"
    assert not bar._meter.to_loggers


def test_a_monitor_given_is_the_one_the_bar_shows():
    console = Console(file=io.StringIO(), width=200)
    bar, given = DrawingProgressBar(console=console), ThroughputMonitor(count_flops=False)
    trainer = quiet_trainer(max_epochs=1, callbacks=[bar, given], enable_progress_bar=True, log_every_n_steps=1)
    trainer.fit(LinearNet(), linear_loader())
    assert bar._meter is None and given.history  # no second count
    assert "samples/s=" in console.file.getvalue()


@pytest.mark.parametrize("dims", [{"tp": 2, "pp": 1}, {"tp": 1, "pp": 2}, {"tp": 1, "pp": 1}])
def test_flops_are_not_counted_where_the_model_itself_is_split(dims):
    # Under tensor parallel FlopCounterMode counts DTensor ops at their global shapes (tp times
    # one rank's work), and a pipeline's stages run backward with autograd.grad: no figure rather
    # than a wrong one. Data parallel alone (tp = pp = 1) is counted.
    capabilities = model_parallel_capabilities(
        ParallelDims(**dims, dp_shard=1).resolved(dims["tp"] * dims["pp"]), replicated=False
    )
    trainer = SimpleNamespace(
        runtime=SimpleNamespace(device=torch.device("cpu"), capabilities=capabilities), model=None, precision="32-true"
    )
    monitor = ThroughputMonitor(peak_flops=1e12)
    monitor.on_train_start(trainer, None)
    monitor.on_train_epoch_start(trainer, None)
    counting = monitor._counter is not None
    monitor.on_exception(trainer, None, RuntimeError("end of the test"))  # leaves the counter's mode
    assert counting == (dims == {"tp": 1, "pp": 1})


class MatmulSGD(torch.optim.SGD):
    """SGD whose step also runs a matmul: FLOPs that a count of forward and backward must not include."""

    @torch.no_grad()
    def step(self, closure=None):
        loss = super().step(closure)
        for group in self.param_groups:
            for p in group["params"]:
                torch.mm(p.reshape(1, -1), p.reshape(-1, 1))
        return loss


def test_the_flop_count_ends_where_the_optimizer_steps_and_leaves_no_hook():
    class Plain(LinearNet):
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    monitor = ThroughputMonitor()
    trainer = quiet_trainer(max_epochs=1, callbacks=[monitor])
    trainer.fit(Plain(), linear_loader())
    assert monitor.flops_per_batch == 3 * (2 * B * IN * OUT)  # the model's forward and backward only
    assert not trainer.optimizers[0]._optimizer_step_pre_hooks, "the pre-hook outlived the count"


def test_an_optimizer_with_its_own_step_is_counted_through_its_batch():
    class StepsWithMatmuls(LinearNet):
        def configure_optimizers(self):
            return MatmulSGD(self.parameters(), lr=0.1)

    monitor = ThroughputMonitor()
    trainer = quiet_trainer(max_epochs=1, callbacks=[monitor])
    trainer.fit(StepsWithMatmuls(), linear_loader())
    # Its step trains inside it (the closure, as under Lightning): the count ends with the batch, the
    # step's own matmuls in it (2 FLOPs per parameter element)
    assert monitor.flops_per_batch == 3 * (2 * B * IN * OUT) + 2 * (IN * OUT + OUT)
    assert not trainer.optimizers[0]._optimizer_step_pre_hooks


def test_a_module_stepping_with_a_closure_is_counted_through_its_batch():
    class ManualClosure(LinearNet):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            optimizer = self.optimizers()

            def closure():
                optimizer.zero_grad()
                loss = LinearNet.training_step(self, batch, batch_idx)
                self.manual_backward(loss)
                return loss

            return optimizer.step(closure)

    monitor = ThroughputMonitor()
    quiet_trainer(max_epochs=1, callbacks=[monitor]).fit(ManualClosure(), linear_loader())
    # forward and backward run inside step(closure): a count that ended when step() began would be 0
    assert monitor.flops_per_batch == 3 * (2 * B * IN * OUT)


def test_an_optimizer_step_override_is_counted_through_its_batch():
    class WarmUp(LinearNet):
        def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
            optimizer.param_groups[0]["lr"] = 0.1 * min(1.0, (self.trainer.global_step + 1) / 3)
            optimizer.step(closure=optimizer_closure)  # forward and backward run inside step()

    monitor = ThroughputMonitor()
    quiet_trainer(max_epochs=1, callbacks=[monitor]).fit(WarmUp(), linear_loader())
    assert monitor.flops_per_batch == 3 * (2 * B * IN * OUT)


class BigValidation(LinearNet):
    """Validation runs a matmul far larger than training's: FLOPs that a training count must not take in."""

    def validation_step(self, batch, batch_idx):
        torch.mm(torch.ones(64, 64), torch.ones(64, 64))


def test_validation_inside_the_counted_batch_is_not_counted():
    # Accumulating two batches, checking every batch: the first batch's validation runs before its
    # end hooks, with no optimizer step to end the count before it.
    monitor = ThroughputMonitor()
    quiet_trainer(
        max_epochs=1,
        callbacks=[monitor],
        accumulate_grad_batches=2,
        val_check_interval=1,
        num_sanity_val_steps=0,
        limit_val_batches=1,
    ).fit(BigValidation(), linear_loader(), linear_loader(1))
    assert monitor.flops_per_batch == 3 * (2 * B * IN * OUT)


def test_a_run_resumed_inside_an_epoch_counts_its_next_step(tmp_path):
    first = quiet_trainer(max_steps=2, default_root_dir=tmp_path)
    first.fit(LinearNet(), linear_loader())
    first.save_checkpoint(tmp_path / "mid.ckpt")
    monitor = ThroughputMonitor()
    # exact: the rest of the epoch the max_steps pause left (Lightning's resume of a file saved after that
    # fit starts the next epoch, past max_epochs: nothing would train)
    resumed = quiet_trainer(max_epochs=1, callbacks=[monitor], log_every_n_steps=1, exact_resume=True)
    resumed.fit(LinearNet(), linear_loader(), ckpt_path=str(tmp_path / "mid.ckpt"))
    assert resumed.global_step == 5 and monitor.flops_per_batch == 3 * (2 * B * IN * OUT)
    assert [round(f["samples_per_sec"] / f["batches_per_sec"]) for f in monitor.history] == [B], (
        "one window after the counted step (the fourth), with step 5 in it"
    )
