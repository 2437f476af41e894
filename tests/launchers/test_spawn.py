"""What cannot travel to spawned workers is named before any process starts; ddp without a
script to re-run says what to use instead."""

import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

import trainmesh as tm
from helpers.models import quiet_trainer, random_classification
from trainmesh.launchers.elastic import script_command
from trainmesh.launchers.spawn import SpawnLauncher, check_picklable

TORCHRUN_VARIABLES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "SLURM_NTASKS",
    "SLURM_PROCID",
)


class LambdaLossNet(tm.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(16, 4)
        self.loss_fn = lambda logits, y: F.cross_entropy(logits, y)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return self.loss_fn(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Holder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = LambdaLossNet()


@pytest.fixture
def no_launcher_env(monkeypatch):
    for name in TORCHRUN_VARIABLES:
        monkeypatch.delenv(name, raising=False)


# ---- check_picklable ---------------------------------------------------------------------------
def test_check_picklable_names_the_lambda_attribute_with_its_class_and_the_fix():
    with pytest.raises(ValueError) as info:
        check_picklable({"arguments": (1, LambdaLossNet())})
    message = str(info.value)
    assert "LambdaLossNet.loss_fn cannot be pickled" in message
    assert "strategy='ddp'" in message


def test_check_picklable_follows_submodules_to_the_attribute():
    with pytest.raises(ValueError, match=r"model\.inner\.loss_fn cannot be pickled"):
        check_picklable({"model": Holder()})


def test_check_picklable_looks_inside_a_bound_methods_object():
    with pytest.raises(ValueError, match=r"LambdaLossNet\.loss_fn cannot be pickled"):
        check_picklable({"function": LambdaLossNet().training_step})


def test_check_picklable_accepts_picklable_objects():
    model = LambdaLossNet()
    model.loss_fn = F.cross_entropy
    check_picklable({"model": model, "data": [DataLoader(random_classification(8), batch_size=4)]})


def test_ddp_spawn_fit_on_an_unpicklable_model_fails_before_starting_processes(no_launcher_env, monkeypatch):
    import torch.multiprocessing as mp

    def no_processes(*args, **kwargs):
        raise AssertionError("a process was started")

    monkeypatch.setattr(mp, "start_processes", no_processes)
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        # A one-process group an earlier in-process test left in this pytest worker (its Trainer
        # keeps it until exit): this test is about a launch that would start new processes.
        dist.destroy_process_group()
    trainer = quiet_trainer(strategy="ddp_spawn", devices=2, max_epochs=1)
    assert isinstance(trainer.runtime.launcher, SpawnLauncher)
    # No process started (no_processes above raises); no time bound, which a loaded machine breaks.
    with pytest.raises(ValueError) as info:
        trainer.fit(LambdaLossNet(), DataLoader(random_classification(16), batch_size=4))
    message = str(info.value)
    assert "LambdaLossNet.loss_fn" in message and "strategy='ddp'" in message


# ---- script_command ----------------------------------------------------------------------------
def test_script_command_without_a_script_suggests_fork_or_spawn(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["-c"])
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
    with pytest.raises(ValueError, match="ddp_fork") as info:
        script_command()
    assert "ddp_spawn" in str(info.value)


def test_script_command_reruns_a_script_with_its_arguments(monkeypatch, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("")
    monkeypatch.setattr(sys, "argv", [str(script), "--lr", "0.1"])
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
    assert script_command() == [str(script), "--lr", "0.1"]


def test_script_command_of_a_script_that_changed_directory_says_so(monkeypatch, tmp_path):
    """``python train.py`` that calls os.chdir before a ddp fit: its relative argv[0] is not found from the new
    directory. Before: refused as 'an interactive session (notebook, REPL or python -c)', which it is not."""
    script = tmp_path / "train.py"
    script.write_text("")
    main = types.ModuleType("__main__")
    main.__file__ = str(script)
    monkeypatch.setattr(sys, "argv", ["train.py", "--lr", "0.1"])
    monkeypatch.setitem(sys.modules, "__main__", main)
    elsewhere = tmp_path / "outputs"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with pytest.raises(ValueError) as info:
        script_command()
    message = str(info.value)
    assert "interactive" not in message and "os.chdir" in message and str(script) in message, message


def test_script_command_reruns_a_module_started_with_dash_m(monkeypatch):
    main = types.ModuleType("__main__")
    main.__spec__ = types.SimpleNamespace(name="mypkg.train.__main__")
    monkeypatch.setattr(sys, "argv", ["/somewhere/mypkg/train/__main__.py", "fit"])
    monkeypatch.setitem(sys.modules, "__main__", main)
    assert script_command() == ["-m", "mypkg.train", "fit"]
    main.__spec__ = types.SimpleNamespace(name="mypkg.run")
    assert script_command() == ["-m", "mypkg.run", "fit"]


def test_elastic_launch_from_python_c_reports_the_fix_without_starting_workers():
    code = textwrap.dedent("""
        import torch, trainmesh as tm
        from torch.utils.data import DataLoader, TensorDataset

        class Net(tm.Module):
            def __init__(self):
                super().__init__()
                self.layer = torch.nn.Linear(4, 1)
            def training_step(self, batch, batch_idx):
                return self.layer(batch[0]).pow(2).mean()
            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        trainer = tm.Trainer(strategy="ddp", devices=2, accelerator="cpu", max_epochs=1, logger=False,
                             enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
        trainer.fit(Net(), DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4))
        print("FIT RETURNED")
    """)
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_VARIABLES}
    env["OMP_NUM_THREADS"] = "1"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env, cwd=Path(__file__).parent
    )
    assert result.returncode != 0
    assert "FIT RETURNED" not in result.stdout
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("ValueError:") and "ddp_fork" in last_line and "ddp_spawn" in last_line
    # It failed in trainmesh, before the elastic agent or any worker existed.
    assert "trainmesh/launchers/elastic.py" in result.stderr
    assert "torch/distributed" not in result.stderr
    assert "worker rank" not in result.stderr


class _CollectedWhere:
    """Cyclic garbage whose finalizer records the process it ran in."""

    def __init__(self, record: Path) -> None:
        self.record, self.cycle = record, self

    def __del__(self) -> None:
        with open(self.record, "a") as out:
            out.write(f"{os.getpid()}\n")


def _collect_garbage() -> None:
    import gc

    gc.collect()  # what a worker's allocations trigger sooner or later


def test_fork_collects_this_process_s_garbage_before_the_workers_start(tmp_path):
    # A finalizer run in a forked worker runs without this process's threads: a torchft Manager's
    # waited there forever. Collected before the fork, it runs here, once.
    import gc

    record = tmp_path / "collected"
    gc.disable()  # keep the cycle uncollected until the launch (as between two of the suite's tests)
    try:
        _CollectedWhere(record)
        SpawnLauncher(devices=2, num_nodes=1, start_method="fork").launch(_collect_garbage)
    finally:
        gc.enable()
    assert record.read_text().split() == [str(os.getpid())]
