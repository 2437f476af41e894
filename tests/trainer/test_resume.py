"""Stop anywhere, resume in a new process, end bit-identical to the run that never stopped."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).with_name("resume_run.py")


def _run(*args: str, env: dict[str, str], expect: int = 0) -> None:
    result = subprocess.run([sys.executable, str(SCRIPT), *args], env={**os.environ, **env},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == expect, result.stderr[-3000:]


@pytest.mark.parametrize(
    ("stop_batch", "env"),
    [
        pytest.param(17, {}, id="mid-epoch"),
        pytest.param(12, {}, id="epoch-end"),  # 96 samples / 8 = 12 batches per epoch
        pytest.param(20, {"ACCUMULATE": "3", "SCHED": "epoch"}, id="mid-accumulation"),
        pytest.param(7, {"WORKERS": "2"}, id="loader-workers"),
        # 2 ranks x 6 batches an epoch: batch 17 is mid-epoch; epoch means must not double count.
        pytest.param(17, {"STRATEGY": "ddp", "DEVICES": "2", "OMP_NUM_THREADS": "1"}, id="ddp-mid-epoch"),
    ],
)
def test_stop_and_resume_is_bit_identical(tmp_path, stop_batch, env):
    full, resumed, ckpt = tmp_path / "full.pt", tmp_path / "resumed.pt", tmp_path / "stop.ckpt"
    _run("full", str(full), env=env)
    _run("stop", str(tmp_path / "unused.pt"), str(ckpt), str(stop_batch), env=env, expect=17)
    assert ckpt.exists()
    _run("resume", str(resumed), str(ckpt), env=env)

    reference, candidate = torch.load(full), torch.load(resumed)
    assert candidate["global_step"] == reference["global_step"]
    for name, tensor in reference["state_dict"].items():
        assert torch.equal(tensor, candidate["state_dict"][name]), f"{name} differs after resume"
    # The epoch means logged after resuming equal the uninterrupted run's, too.
    assert candidate["metrics"]["train_loss_epoch"] == reference["metrics"]["train_loss_epoch"]
    assert candidate["metrics"]["val_loss"] == reference["metrics"]["val_loss"]
