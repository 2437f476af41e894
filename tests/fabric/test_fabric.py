"""trainmesh.Fabric beside Lightning Fabric 2.6 on one process: the same program, the same seed.

One small loop (setup, setup_dataloaders, backward, clip_gradients, optimizer step, log_dict into
Fabric's CSVLogger, save/load, callbacks through ``call``) runs under each Fabric in this process;
the trained weights are bit-identical, the checkpoint files hold the same keys, the loggers write the
same ``metrics.csv``, and what the program reads back (types, ``load``'s remainder) is the same.
Fabric's checks (a second setup, a loader that is not a DataLoader, ``load`` of a missing key,
``loss.backward()`` under bf16-mixed, ...) answer with Fabric's exception and words.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

lightning_fabric = pytest.importorskip("lightning.fabric")


def _api(framework: str) -> SimpleNamespace:
    if framework == "lightning":
        from lightning.fabric import Fabric
        from lightning.fabric.loggers import CSVLogger
    else:
        from trainmesh import Fabric
        from trainmesh.fabric.loggers import CSVLogger
    return SimpleNamespace(Fabric=Fabric, CSVLogger=CSVLogger)


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def on_train_epoch_end(self, epoch: int) -> None:  # called with fabric= too: filtered out, as Fabric's
        self.calls.append(("on_train_epoch_end", epoch))

    def on_after_optimizer_step(self, strategy, optimizer) -> None:
        self.calls.append(("on_after_optimizer_step", type(optimizer).__name__))


def _train(framework: str, root: Path, precision: str) -> dict:
    L = _api(framework)
    recorder = Recorder()
    fabric = L.Fabric(
        accelerator="cpu", devices=1, precision=precision, callbacks=[recorder], loggers=L.CSVLogger(root / "logs")
    )
    fabric.launch()
    fabric.seed_everything(3, verbose=False)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model, optimizer = fabric.setup(model, optimizer)
    x = torch.randn(24, 6)
    y = (x[:, 0] > 0).long()
    loader = fabric.setup_dataloaders(DataLoader(TensorDataset(x, y), batch_size=6, shuffle=True))
    step = 0
    for epoch in range(2):
        for xb, yb in loader:
            optimizer.zero_grad()
            out = model(xb)
            loss = torch.nn.functional.cross_entropy(out, yb)
            fabric.backward(loss)
            norm = fabric.clip_gradients(model, optimizer, max_norm=0.5)
            optimizer.step()
            fabric.log_dict({"loss": loss, "norm": norm, "epoch": epoch}, step=step)
            step += 1
        fabric.call("on_train_epoch_end", epoch, fabric=fabric)
    path = root / "ckpt" / "state.ckpt"
    fabric.save(path, {"model": model, "optimizer": optimizer, "step": step, "extra": [1, 2]})
    state = {"model": model, "optimizer": optimizer, "step": 0}
    remainder = fabric.load(path, state)
    fabric.logger.finalize("success")
    return {
        "weights": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "types": (type(model).__name__, type(optimizer).__name__, isinstance(optimizer, torch.optim.Adam)),
        "out_dtype": out.dtype,
        "checkpoint": torch.load(path, weights_only=False),
        "remainder": remainder,
        "step": state["step"],
        "csv": (root / "logs" / "lightning_logs" / "version_0" / "metrics.csv").read_text(),
        "calls": recorder.calls,
        "collectives": (fabric.all_reduce(3.0), fabric.all_gather(torch.ones(2)), fabric.broadcast("x")),
        "ranks": (fabric.global_rank, fabric.local_rank, fabric.world_size, fabric.is_global_zero, str(fabric.device)),
    }


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed", "bf16-true"])
def test_a_loop_trains_writes_and_logs_as_lightning_fabric(tmp_path, precision):
    theirs = _train("lightning", tmp_path / "lightning", precision)
    ours = _train("trainmesh", tmp_path / "trainmesh", precision)
    assert ours["weights"].keys() == theirs["weights"].keys()
    assert all(torch.equal(ours["weights"][k], theirs["weights"][k]) for k in theirs["weights"])
    assert ours["checkpoint"].keys() == theirs["checkpoint"].keys()
    for key in ("model", "optimizer"):
        assert ours["checkpoint"][key].keys() == theirs["checkpoint"][key].keys()
    assert ours["checkpoint"]["optimizer"]["param_groups"] == theirs["checkpoint"]["optimizer"]["param_groups"]
    assert ours["csv"] == theirs["csv"]
    for key in ("types", "out_dtype", "remainder", "step", "calls", "ranks"):
        assert ours[key] == theirs[key], key
    for mine, their in zip(ours["collectives"][:2], theirs["collectives"][:2]):
        assert torch.equal(mine, their)
    assert ours["collectives"][2] == theirs["collectives"][2]


def _error(call) -> tuple[type, str]:
    with pytest.raises(Exception) as caught:
        call()
    return type(caught.value), str(caught.value)


def _misuses(framework: str, root: Path) -> list[tuple[type, str]]:
    L = _api(framework)
    fabric = L.Fabric(accelerator="cpu", devices=1, precision="bf16-mixed")
    model, optimizer = fabric.setup(torch.nn.Linear(2, 1), torch.optim.SGD(torch.nn.Linear(2, 1).parameters()))
    fabric.save(root / "a.ckpt", {"model": model, "n": 1})
    plain = L.Fabric(accelerator="cpu", devices=2)  # several devices, not launched
    return [
        _error(lambda: fabric.setup(model)),
        _error(lambda: fabric.setup_dataloaders([1, 2])),
        _error(lambda: fabric.setup_dataloaders()),
        _error(lambda: fabric.load(root / "a.ckpt", {"model": model, "missing": 0})),
        _error(lambda: fabric.clip_gradients(model, optimizer, clip_val=1.0, max_norm=1.0)),
        _error(lambda: fabric.clip_gradients(model, optimizer)),
        _error(lambda: fabric.no_backward_sync(torch.nn.Linear(2, 1))),
        _error(lambda: model(torch.ones(3, 2)).sum().backward()),
        _error(lambda: fabric.save(root / "b.ckpt", {"model": model}, filter={"other": lambda k, v: True})),
        _error(lambda: fabric.launch(3)),
        _error(lambda: fabric.launch(lambda: None)),
        _error(lambda: plain.setup(torch.nn.Linear(2, 1))),
        _error(lambda: L.Fabric(accelerator="cpu", precision="bf17")),
        # the Trainer's names that Fabric's registry lacks
        _error(lambda: L.Fabric(accelerator="cpu", strategy="single_device")),
        _error(lambda: L.Fabric(accelerator="cpu", strategy="DDP_spawn_find_unused_parameters_true")),
        _error(lambda: fabric.log_dict({"vector": torch.ones(2)})),  # a logged tensor must hold one number
    ]


def test_fabric_s_checks_answer_with_fabric_s_words(tmp_path):
    theirs = _misuses("lightning", tmp_path / "l")
    (tmp_path / "t").mkdir()
    ours = _misuses("trainmesh", tmp_path / "t")
    for (their_type, their_text), (our_type, our_text) in zip(theirs, ours, strict=True):
        assert our_type is their_type, (our_type, their_type, their_text)
        # a function's address differs between the two runs
        assert re.sub(r"0x[0-9a-f]+", "", our_text) == re.sub(r"0x[0-9a-f]+", "", their_text)


def _filtered_and_raw(framework: str, root: Path) -> tuple:
    L = _api(framework)
    fabric = L.Fabric(accelerator="cpu", devices=1)
    torch.manual_seed(0)
    model = fabric.setup(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1)))
    fabric.save(root / "f.ckpt", {"model": model, "n": 1}, filter={"model": lambda key, _: key.startswith("1.")})
    fabric.save(root / "raw.ckpt", model.state_dict())  # a raw state dict: load_raw's file
    torch.manual_seed(1)
    other = fabric.setup(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1)))
    fabric.load_raw(root / "raw.ckpt", other)
    everything = fabric.load(root / "f.ckpt")
    return sorted(everything["model"]), everything["n"], [p.tolist() for p in other.parameters()]


def test_save_filter_and_load_raw_as_lightning_fabric(tmp_path):
    (tmp_path / "l").mkdir()
    (tmp_path / "t").mkdir()
    assert _filtered_and_raw("trainmesh", tmp_path / "t") == _filtered_and_raw("lightning", tmp_path / "l")


class Settings:  # not on torch's weights_only allowlist
    def __init__(self, lr: float) -> None:
        self.lr = lr


def _weights_only(framework: str, root: Path) -> list:
    L = _api(framework)
    fabric = L.Fabric(accelerator="cpu", devices=1)
    model = fabric.setup(torch.nn.Linear(2, 1))
    fabric.save(root / "plain.ckpt", {"model": model, "step": 3})
    fabric.save(root / "objects.ckpt", {"model": model, "settings": Settings(0.1)})
    answers: list = [sorted(fabric.load(root / "plain.ckpt", weights_only=True))]
    for weights_only in (None, True, False):
        try:
            answers.append(type(fabric.load(root / "objects.ckpt", {"model": model}, weights_only=weights_only)))
        except Exception as error:  # torch's UnpicklingError, as Fabric's torch.load raises it
            answers.append((type(error), str(error).split("\n")[0]))
    return answers


def test_load_s_weights_only_is_torch_load_s_as_in_lightning_fabric(tmp_path):
    (tmp_path / "l").mkdir()
    (tmp_path / "t").mkdir()
    ours, theirs = _weights_only("trainmesh", tmp_path / "t"), _weights_only("lightning", tmp_path / "l")
    assert ours == theirs
    assert theirs[3] is dict


def _mixed_precision_plugin(Fabric: type, MixedPrecision: type, device: str) -> list:
    # the plugin runs as given: float16 autocast (on the CPU too), with the program's own scaler
    scaler = torch.amp.GradScaler(device, init_scale=16.0, growth_interval=1)
    fabric = Fabric(accelerator=device, devices=1, plugins=[MixedPrecision("16-mixed", device, scaler=scaler)])
    torch.manual_seed(0)
    model, optimizer = fabric.setup(*(lambda m: (m, torch.optim.SGD(m.parameters(), lr=0.1)))(torch.nn.Linear(4, 1)))
    for _ in range(2):
        fabric.backward(model(torch.randn(3, 4, device=device)).pow(2).mean())
        optimizer.step()
        optimizer.zero_grad()
    return [scaler.get_scale(), [p.detach().cpu() for p in model.parameters()]]


@pytest.mark.cuda
def test_a_mixed_precision_plugin_s_scaler_steps_on_the_gpu_as_lightning_fabric_s():
    from lightning.fabric import Fabric as Theirs
    from lightning.fabric.plugins import MixedPrecision as TheirPlugin

    from trainmesh import Fabric as Ours
    from trainmesh.plugins import MixedPrecision as OurPlugin

    ours, theirs = (
        _mixed_precision_plugin(Ours, OurPlugin, "cuda"),
        _mixed_precision_plugin(Theirs, TheirPlugin, "cuda"),
    )
    assert ours[0] == theirs[0] == 64.0
    assert all(torch.equal(a, b) for a, b in zip(ours[1], theirs[1], strict=True))


def _plugins(framework: str) -> list:
    if framework == "lightning":
        from lightning.fabric import Fabric
        from lightning.fabric.plugins import MixedPrecision, TorchCheckpointIO
        from lightning.fabric.plugins.environments import LightningEnvironment
    else:
        from trainmesh import Fabric
        from trainmesh.plugins import MixedPrecision, TorchCheckpointIO
        from trainmesh.plugins.environments import LightningEnvironment

    answers: list = _mixed_precision_plugin(Fabric, MixedPrecision, "cpu")
    for plugins, precision in (
        ([TorchCheckpointIO(), LightningEnvironment()], None),  # Fabric's default writer, this process's environment
        ([TorchCheckpointIO(), TorchCheckpointIO()], None),
        ("bf16-mixed", None),
        (MixedPrecision("bf16-mixed", "cpu"), "bf16-mixed"),
    ):
        try:
            answers.append(type(Fabric(accelerator="cpu", devices=1, plugins=plugins, precision=precision)).__name__)
        except (TypeError, ValueError) as error:
            answers.append((type(error), re.sub(r"<[\w.]*\.(\w+) object at 0x[0-9a-f]+>", r"<\1>", str(error))))
    return answers


def test_plugins_are_taken_or_refused_as_lightning_fabric_takes_them():
    ours, theirs = _plugins("trainmesh"), _plugins("lightning")
    assert ours[0] == theirs[0] == 64.0
    assert all(torch.equal(a, b) for a, b in zip(ours[1], theirs[1], strict=True))
    assert ours[2:] == theirs[2:]


def _other_members(framework: str, capsys) -> dict:
    L = _api(framework)

    class Subclassed(L.Fabric):
        def run(self, value):  # Fabric's older form: fabric.run(...) launches it
            return (value, self.world_size)

    fabric = L.Fabric(accelerator="cpu", devices=1, precision="bf16-true")
    with fabric.init_module():
        module = torch.nn.Linear(2, 2)
    with fabric.init_tensor():
        made = torch.ones(2)
    torch.manual_seed(5)
    with fabric.init_module(empty_init=True):  # torch.nn.init skipped: no random draws
        torch.nn.Linear(2, 2)
    drawn_after_empty_init = torch.rand(1).item()
    module = fabric.setup_module(module)
    optimizer = fabric.setup_optimizers(torch.optim.SGD(module.parameters(), lr=0.1))
    with fabric.autocast():
        out = module(torch.ones(1, 2))
    fabric.barrier()
    fabric.print("printed", 1)
    with pytest.warns(DeprecationWarning, match="sharded_model"):
        fabric.sharded_model()
    return {
        "dtypes": (module.weight.dtype, made.dtype, out.dtype),
        "drawn_after_empty_init": drawn_after_empty_init,
        "optimizer": (type(optimizer).__name__, isinstance(optimizer, torch.optim.SGD)),
        "to_device": (fabric.to_device(torch.ones(1)).device, fabric.to_device(torch.nn.Linear(1, 1)).weight.device),
        "node_rank": fabric.node_rank,
        "accelerator": type(fabric.accelerator).__name__,
        "printed": capsys.readouterr().out,
        "run": Subclassed(accelerator="cpu", devices=1).run(5),
        # Fabric's convert_to_tensors: nested numbers too, int32, bool as uint8, numpy arrays
        "converted": repr((fabric.all_reduce({"n": 3, "f": [1.5, True]}), fabric.all_gather(np.arange(2)))),
    }


def test_the_other_members_answer_as_lightning_fabric(capsys):
    assert _other_members("trainmesh", capsys) == _other_members("lightning", capsys)


def test_a_seed_set_before_launch_reaches_the_processes_launch_spawns():
    # Fabric's seed_everything sets PL_GLOBAL_SEED, which ddp_spawn's processes inherit: their samplers
    # shuffle with it. trainmesh hands the seed over in the Runtime that the spawned processes receive
    # (measured on 2 processes in /work/progs/fabric/RESULTS.md: each rank's samples Fabric's).
    import trainmesh
    from trainmesh.seed import seed_everything

    fabric = trainmesh.Fabric(accelerator="cpu", devices=1)
    seed_everything(11, verbose=False)
    assert fabric.launch(lambda f: f._runtime.seed_settings.seed) == 11
