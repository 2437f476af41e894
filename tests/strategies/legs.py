"""Running one leg of a multi-process test (a program of ddp_run.py) with a hard timeout."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import torch

HERE = Path(__file__).parent
SCRIPT = HERE / "ddp_run.py"


def run(*args: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run a leg in its own session; on timeout kill the whole session so no worker outlives it."""
    process = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}, cwd=HERE,
                               start_new_session=True)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path)["state_dict"]
