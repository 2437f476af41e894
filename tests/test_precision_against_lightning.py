"""Float16 with a GradScaler on the CPU, as Lightning 2.6 runs it when a program asks for it
(``plugins=[MixedPrecision("16-mixed", "cpu")]``): the same program under Lightning and trainmesh,
compared on the losses, the gradients ``on_before_optimizer_step`` sees, the scaler's final scale, the
step count and the trained weights, bit for bit. Automatic optimization plain, clipping by norm and by
value, accumulating, overflowing (the scaler skips steps), and manual optimization with
``self.clip_gradients`` (Lightning clips the still scaled gradients there: its precision unscales
only in ``optimizer.step()``); LBFGS stops with Lightning's exception."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
import trainmesh.plugins as tm_plugins
from trainmesh.utilities.exceptions import MisconfigurationException

pl = pytest.importorskip("lightning.pytorch")
import lightning.pytorch.plugins as pl_plugins  # noqa: E402

QUIET = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False, "enable_checkpointing": False}
TRAINER = {
    "plain": {},
    "clip_norm": {"gradient_clip_val": 0.3},
    "clip_value": {"gradient_clip_val": 0.01, "gradient_clip_algorithm": "value"},
    "accumulate": {"accumulate_grad_batches": 2},
    "overflow": {},
    "manual_clip": {},
    "lbfgs": {},
}


def run(framework: str, case: str) -> dict:
    Trainer, Module, plugins = (
        (pl.Trainer, pl.LightningModule, pl_plugins)
        if framework == "lightning"
        else (tm.Trainer, tm.Module, tm_plugins)
    )
    seen: dict = {"losses": [], "grad_norms": []}

    class Net(Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
            self.automatic_optimization = case != "manual_clip"

        def training_step(self, batch, batch_idx):
            loss = nn.functional.mse_loss(self.net(batch[0]), batch[1])
            seen["losses"].append(loss.item())
            if self.automatic_optimization:
                return loss
            optimizer = self.optimizers()
            optimizer.zero_grad()
            self.manual_backward(loss)
            self.clip_gradients(optimizer, gradient_clip_val=0.5)
            optimizer.step()

        def on_before_optimizer_step(self, optimizer):
            seen["grad_norms"].append(sum(p.grad.norm().item() for p in self.parameters()))

        def configure_optimizers(self):
            if case == "lbfgs":
                return torch.optim.LBFGS(self.parameters(), lr=0.1)
            return torch.optim.Adam(self.parameters(), lr=0.01)

    torch.manual_seed(0)
    model = Net()
    data = torch.Generator().manual_seed(1)
    x = torch.randn(32, 8, generator=data) * (1e4 if case == "overflow" else 1.0)
    y = torch.randn(32, 1, generator=data)
    trainer = Trainer(max_steps=6, plugins=[plugins.MixedPrecision("16-mixed", "cpu")], **QUIET, **TRAINER[case])
    trainer.fit(model, DataLoader(TensorDataset(x, y), batch_size=4))
    seen["grad_norms"] = ["nan" if math.isnan(n) else n for n in seen["grad_norms"]]
    seen["scale"] = trainer.precision_plugin.scaler.get_scale()
    seen["global_step"] = trainer.global_step
    seen["weights"] = [t.detach() for t in model.state_dict().values()]
    return seen


@pytest.mark.parametrize("case", [c for c in TRAINER if c != "lbfgs"])
def test_fp16_with_a_grad_scaler_on_the_cpu_trains_as_lightnings(case):
    """Before: manual optimization's clip_gradients unscaled first (weights 0.0127 apart after 6 steps)."""
    lightning, ours = run("lightning", case), run("trainmesh", case)
    assert [torch.equal(a, b) for a, b in zip(lightning.pop("weights"), ours.pop("weights"))] == [True] * 4
    assert ours == lightning


def test_lbfgs_under_fp16_stops_with_lightnings_exception():
    with pytest.raises(Exception) as lightning:
        run("lightning", "lbfgs")
    with pytest.raises(ValueError) as ours:  # a ValueError too, as trainmesh raised before
        run("trainmesh", "lbfgs")
    assert type(lightning.value).__name__ == "MisconfigurationException"
    assert isinstance(ours.value, MisconfigurationException)
    assert str(ours.value).startswith(str(lightning.value))


def resumed(framework: str, tmp_path) -> tuple:
    """3 steps of an overflowing fp16 run (its own scaler, growing every 2 steps), saved, then resumed to 6."""
    Trainer, Module, plugins = (
        (pl.Trainer, pl.LightningModule, pl_plugins)
        if framework == "lightning"
        else (tm.Trainer, tm.Module, tm_plugins)
    )

    class Net(Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

        def training_step(self, batch, batch_idx):
            return nn.functional.mse_loss(self.net(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=0.01)

    data = torch.Generator().manual_seed(1)
    x, y = torch.randn(32, 8, generator=data) * 3e3, torch.randn(32, 1, generator=data)

    def trainer(steps):
        scaler = torch.amp.GradScaler("cpu", growth_interval=2)
        return Trainer(max_steps=steps, plugins=[plugins.MixedPrecision("16-mixed", "cpu", scaler=scaler)], **QUIET)

    torch.manual_seed(0)
    first = trainer(3)
    first.fit(Net(), DataLoader(TensorDataset(x, y), batch_size=4))
    path = tmp_path / f"{framework}.ckpt"
    first.save_checkpoint(path)
    torch.manual_seed(5)  # other initial weights: the checkpoint's must win
    model, second = Net(), trainer(6)
    second.fit(model, DataLoader(TensorDataset(x, y), batch_size=4), ckpt_path=path)
    saved = first.precision_plugin.scaler.state_dict()
    return saved, second.precision_plugin.scaler.state_dict(), [t.detach() for t in model.state_dict().values()]


def test_a_resumed_fp16_run_restores_the_scaler_as_lightnings(tmp_path):
    """The scaler's state travels in the checkpoint: the resumed run's scale and weights are Lightning's
    (measured: scale 8192 at the save, 1024 after the resumed steps)."""
    lightning, ours = resumed("lightning", tmp_path), resumed("trainmesh", tmp_path)
    assert ours[:2] == lightning[:2]
    assert [torch.equal(a, b) for a, b in zip(lightning[2], ours[2])] == [True] * 4


def test_lightning_one_mixed_precision_plugin_at_16_trains_as_pytorch_lightning_1_9_5_on_the_cpu():
    """pytorch-lightning 1.9.5's ``MixedPrecisionPlugin(16, "cpu")`` makes ``torch.cuda.amp.GradScaler()``,
    which disables itself without CUDA: float16 autocast, no loss scaling. Measured against 1.9.5 itself
    (its venv, the same program: weights bit-equal); here against that loop in plain torch. Before, trainmesh
    scaled the loss with an enabled CPU GradScaler (its first step skipped: losses 2.4002 vs 2.3568 at the
    second step). 2.x's spelling (``MixedPrecisionPlugin("16-mixed", "cpu")``) is Lightning 2.6's."""
    if torch.cuda.is_available():
        pytest.skip("1.9.5's CUDA GradScaler is enabled where CUDA is")
    data = torch.Generator().manual_seed(1)
    x, y = torch.randn(32, 8, generator=data), torch.randn(32, 1, generator=data)
    losses = []

    class Net(tm.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

        def training_step(self, batch, batch_idx):
            losses.append(nn.functional.mse_loss(self.net(batch[0]), batch[1]))
            return losses[-1]

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    model = Net()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the renamed class's, and torch's "CUDA is not available. Disabling."
        plugin = tm_plugins.MixedPrecisionPlugin(16, "cpu")
    trainer = tm.Trainer(max_steps=4, plugins=[plugin], **QUIET)
    trainer.fit(model, DataLoader(TensorDataset(x, y), batch_size=4))
    assert trainer.precision_plugin.scaler is not None and not trainer.precision_plugin.scaler.is_enabled()

    torch.manual_seed(0)
    reference = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for step, (inputs, targets) in enumerate(DataLoader(TensorDataset(x, y), batch_size=4)):
        if step == 4:
            break
        with torch.autocast("cpu", dtype=torch.float16):
            loss = nn.functional.mse_loss(reference(inputs), targets)
        optimizer.zero_grad()
        loss.backward()  # unscaled: the disabled scaler scales nothing and skips no step
        optimizer.step()
        assert torch.equal(loss, losses[step])
    for mine, theirs in zip(model.net.state_dict().values(), reference.state_dict().values()):
        assert torch.equal(mine, theirs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the renamed class's warning
        assert tm_plugins.MixedPrecisionPlugin("16-mixed", "cpu").scaler.is_enabled()  # 2.6's: a CPU scaler


def _gru_run(framework, lightning1=False):
    Trainer, Module = (pl.Trainer, pl.LightningModule) if framework == "lightning" else (tm.Trainer, tm.Module)

    class Recurrent(Module):
        if lightning1:  # a hook only pytorch-lightning 1.x had: the module is a 1.x program's

            def training_epoch_end(self, outputs):
                pass

        def __init__(self):
            super().__init__()
            self.rnn, self.head, self.grads, self.cache = nn.GRU(4, 6, batch_first=True), nn.Linear(6, 1), [], []

        def training_step(self, batch, batch_idx):
            self.cache.append(torch.is_autocast_cache_enabled())
            return self.head(self.rnn(batch[0])[0]).float().pow(2).mean()

        def on_before_optimizer_step(self, optimizer):
            self.grads.append([p.grad.clone() for p in self.parameters()])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.5)

    torch.manual_seed(0)
    model = Recurrent()
    x = torch.randn(8, 5, 4, generator=torch.Generator().manual_seed(1))
    Trainer(max_steps=2, precision="bf16-mixed", accelerator="cpu", **QUIET).fit(
        model, DataLoader(TensorDataset(x), batch_size=4)
    )
    return model


def test_bf16_mixed_autocasts_without_the_weight_cache_as_lightnings_trainer_and_fabric_keeps_it():
    """l-progs14 p11: Lightning's Trainer autocasts with ``cache_enabled=False``; with torch's cache a GRU's
    weight cast once for all time steps gets other gradients (p11: weights 7e-4 away after 18 steps, the
    first gradient already different). Lightning Fabric's autocast keeps the cache, as trainmesh's Fabric."""
    ours, theirs = _gru_run("trainmesh"), _gru_run("lightning")
    assert ours.cache == theirs.cache == [False, False]
    for mine, lightnings in zip(ours.grads, theirs.grads):
        assert all(torch.equal(a, b) for a, b in zip(mine, lightnings))
    assert all(torch.equal(a, b) for a, b in zip(ours.parameters(), theirs.parameters()))
    from lightning.fabric import Fabric

    caches = []
    for fabric in (
        tm.Fabric(accelerator="cpu", precision="bf16-mixed"),
        Fabric(accelerator="cpu", precision="bf16-mixed"),
    ):
        with fabric.autocast():
            caches.append(torch.is_autocast_cache_enabled())
    assert caches == [True, True]


def test_a_lightning_one_module_at_bf16_mixed_keeps_torch_s_autocast_cache_as_pytorch_lightning_1_9_5():
    """pytorch-lightning 1.9.5's NativeMixedPrecisionPlugin autocasts with torch's default (the cache kept:
    its native_amp.py ``torch.autocast(self.device, dtype=...)``), so a 1.x program's RNN keeps 1.9.5's
    gradients; a 2.x module fitted by the same Trainer afterwards gets 2.6's (no cache) again."""
    assert _gru_run("trainmesh", lightning1=True).cache == [True, True]

    class Step(tm.Module):
        def __init__(self):
            super().__init__()
            self.layer, self.cache = nn.Linear(4, 1), []

        def training_step(self, batch, batch_idx):
            self.cache.append(torch.is_autocast_cache_enabled())
            return self.layer(batch[0]).float().mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class OldStep(Step):
        def training_epoch_end(self, outputs):
            pass

    trainer = tm.Trainer(max_epochs=1, precision="bf16-mixed", accelerator="cpu", **QUIET)
    old, new = OldStep(), Step()
    for model in (old, new):
        trainer.fit(model, DataLoader(TensorDataset(torch.randn(4, 4)), batch_size=4))
        trainer.fit_loop.max_epochs += 1
    assert old.cache == [True] and new.cache == [False]
