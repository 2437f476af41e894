"""``CLI(Model, DataModule)`` in a user's own ``main.py``, run as a script in a subprocess: flags,
then a ``--config`` file; the weights it trains equal a plain Trainer run's."""

import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch
import yaml

import trainmesh as tm
from helpers.forked import can_fork, run_forked
from helpers.processes import run_program
from trainmesh.cli import CLI

_SCRIPT = """
import torch
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from trainmesh.cli import CLI


class Net(tm.Module):
    def __init__(self, hidden: int = 32, lr: float = 0.1):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class Data(tm.DataModule):
    def __init__(self, batch_size: int = 4):
        super().__init__()
        self.batch_size = batch_size

    def _loader(self, seed, shuffle):
        x = torch.randn(32, 4, generator=torch.Generator().manual_seed(seed))
        return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=self.batch_size, shuffle=shuffle)

    def train_dataloader(self):
        return self._loader(0, shuffle=True)

    def val_dataloader(self):
        return self._loader(1, shuffle=False)


if __name__ == "__main__":
    cli = CLI(Net, Data)
    torch.save(cli.model.state_dict(), "weights.pt")
    print(f"hidden={cli.model.hparams.hidden} batch_size={cli.datamodule.batch_size}")
"""

_QUIET = {
    "enable_progress_bar": False,
    "enable_model_summary": False,
    "logger": False,
    "accelerator": "cpu",
    "devices": 1,
    "limit_train_batches": 3,
    "num_sanity_val_steps": 0,
}


def _flags(settings: dict) -> list[str]:
    return [
        part
        for key, value in settings.items()
        for part in (f"--trainer.{key}", str(value).lower() if isinstance(value, bool) else str(value))
    ]


def _run_script(cwd: Path, *args: str) -> str:
    src = str(Path(tm.__file__).resolve().parents[1])
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    without = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
    if can_fork():  # a fork of the fork server running main.py as a script, not a new interpreter
        environment = {k: v for k, v in os.environ.items() if k not in without}
        result = run_forked(
            cwd / "main.py", list(args), env={**environment, "OMP_NUM_THREADS": "1", **env}, timeout=120, cwd=cwd
        )
    else:
        result = run_program(["main.py", *args], timeout=120, env=env, without=without, cwd=cwd)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def _script_module(path: Path):
    spec = importlib.util.spec_from_file_location("user_main", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["user_main"] = module  # jsonargparse and pickling look classes up by module
    spec.loader.exec_module(module)
    return module


def test_script_fits_from_flags_and_a_config_file_like_the_python_api(tmp_path, capsys):
    # One launch of the script reads both: the config file, then flags on top of it.
    config = {"data": {"batch_size": 8}, "trainer": {**_QUIET, "default_root_dir": str(tmp_path / "run")}}
    (tmp_path / "x.yaml").write_text(yaml.safe_dump(config))
    _write(tmp_path)
    out = _run_script(tmp_path, "fit", "--config", "x.yaml", "--model.hidden", "8", "--trainer.max_epochs", "2")
    assert "hidden=8 batch_size=8" in out
    last = next(line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("last checkpoint: "))

    # The reference: the same classes, seed and settings through the Python API; bit-exact weights.
    user = _script_module(tmp_path / "main.py")
    tm.seed_everything(0, workers=True)  # the CLI's default --seed
    reference = user.Net(hidden=8)
    trainer = tm.Trainer(max_epochs=2, enable_checkpointing=False, default_root_dir=tmp_path / "ref", **_QUIET)
    trainer.fit(reference, datamodule=user.Data(batch_size=8))
    trained = torch.load(tmp_path / "weights.pt")
    assert trained.keys() == reference.state_dict().keys()
    assert all(torch.equal(trained[k], v) for k, v in reference.state_dict().items())

    # validate (in this process) loads the checkpoint the script wrote and reports the reference's val_loss.
    cli = CLI(
        user.Net,
        user.Data,
        args=["validate", "--config", str(tmp_path / "x.yaml"), "--model.hidden", "8", "--ckpt_path", last],
    )
    assert all(torch.equal(cli.model.state_dict()[k], v) for k, v in reference.state_dict().items())
    [expected] = trainer.validate(reference, datamodule=user.Data(batch_size=8), verbose=False)
    assert float(cli.trainer.callback_metrics["val_loss"]) == pytest.approx(expected["val_loss"], rel=1e-6)
    assert "val_loss" in capsys.readouterr().out  # the results table


def test_mistakes_exit_with_status_2_and_a_message(tmp_path, capsys):
    user = _script_module(_write(tmp_path))
    with pytest.raises(SystemExit) as exit_:
        CLI(user.Net, user.Data, args=["fit", "--model.hiden", "8"])
    assert exit_.value.code == 2 and "hiden" in capsys.readouterr().err
    with pytest.raises(TypeError, match="takes the class itself"):
        CLI(user.Net(), run=False)


def _write(tmp_path: Path) -> Path:
    (tmp_path / "main.py").write_text(_SCRIPT)
    return tmp_path / "main.py"
