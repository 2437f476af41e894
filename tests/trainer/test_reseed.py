"""Lightning's DDP, FSDP and ModelParallel strategies seed every generator again as each run sets up
(in ``setup_distributed``): a program's draws between ``seed_everything`` and
``trainer.fit`` do not change what its hooks draw. Checked against Lightning 2.6 on one CPU process,
and against pytorch-lightning 1.9.5's ``strategy="dp"`` on CPU (which it ran as ddp) through the
recording of ``tests/helpers/lightning1_examples.py``."""

import json
import os
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _run(name: str, folder: Path) -> dict:
    from helpers.forked import can_fork, run_forked
    from helpers.processes import run_program

    out = folder / f"{name}.json"
    args = [name, str(out)]
    if can_fork():  # a fork each: Lightning's ddp leaves its process group in the process it ran in
        done = run_forked(HERE / "reseed_run.py", args, env=dict(os.environ), timeout=300, cwd=folder)
    else:
        done = run_program([str(HERE / "reseed_run.py"), *args], timeout=300, cwd=folder)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


def test_ddp_seeds_again_as_each_run_starts_as_lightning(tmp_path):
    """One process, ``seed_everything(3)`` then draws of the program's own, then fit and validate with
    draws in between: under ``strategy="ddp"`` each hook's torch/NumPy/``random`` draws and the weights
    trained with dropout are Lightning 2.6's (before: trainmesh's ddp went on from the program's draws,
    so the first training_step drew other numbers); under ``"auto"`` neither seeds again."""
    pytest.importorskip("lightning")
    lightning, trainmesh = _run("lightning", tmp_path), _run("trainmesh", tmp_path)
    assert trainmesh == lightning
    ddp = {tuple(seen[:2]): seen[2:] for seen in lightning["ddp"]["seen"]}
    assert ddp[("setup", "fit")] == ddp[("setup", "validate")] == ddp[("before", 0)]  # the seed's first draws
