"""``trainmesh fit`` in real processes: every strategy prints the folder it really logged to,
and fit and test share it."""

import csv
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import trainmesh

_TINY_RUN = [
    "--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.max_epochs", "1",
    "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1", "--trainer.limit_test_batches", "1",
    "--trainer.num_sanity_val_steps", "0", "--trainer.enable_progress_bar", "false",
    "--trainer.enable_model_summary", "false",
]


_LAUNCHER_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                       "MASTER_PORT", "TORCHELASTIC_RUN_ID", "SLURM_NTASKS", "SLURM_PROCID")


def _run_cli(cwd: Path, *args: str, timeout: float = 240) -> str:
    """``python -m trainmesh ARGS`` in its own session; on timeout the whole session is killed,
    workers included, and the test fails instead of hanging."""
    src = str(Path(trainmesh.__file__).resolve().parents[1])
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_VARIABLES}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])))
    process = subprocess.Popen([sys.executable, "-m", "trainmesh", *args], cwd=cwd, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    assert process.returncode == 0, out[-3000:] + err[-3000:]
    return out


def _printed(out: str, label: str) -> str:
    return next(line.split(": ", 1)[1] for line in out.splitlines() if line.startswith(f"{label}: "))


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp_spawn", "ddp_fork", "ddp"])
def test_fit_and_test_log_to_the_printed_folder(tmp_path, strategy):
    # ckpt_path="last" on a first run starts from scratch, with one notice (from rank 0 only).
    out = _run_cli(tmp_path, "fit", "--trainer.strategy", strategy, "--ckpt_path", "last", *_TINY_RUN)
    assert out.count(f"ckpt_path='last': no checkpoint found under {tmp_path}; starting from scratch") == 1, out
    logs = Path(_printed(out, "logs"))
    # The same default as the Python API: <cwd>/trainmesh_logs/version_N.
    assert logs == tmp_path / "trainmesh_logs" / "version_0"
    assert sorted(p.name for p in logs.parent.iterdir()) == ["version_0"], "one run, one version folder"
    with open(logs / "metrics.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert any(row.get("val_loss") for row in rows) and any(row.get("test_loss") for row in rows)
    assert Path(_printed(out, "last checkpoint")).parent == logs / "checkpoints"
