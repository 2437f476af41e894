"""How much of trainmesh a program imports, counted rather than timed (the load-independent side of
``import_time.py``): the trainmesh modules, and the bytes of their source, that ``import trainmesh;
trainmesh.Trainer`` imports, then ``trainmesh.Trainer()``, then a one-step fit on one device, in one
fresh interpreter; and, for each set, the CPU that compiling those sources takes here (best of
``--repeats``: what a process without bytecode caches, as ``PYTHONDONTWRITEBYTECODE=1`` leaves it,
pays for them, less the file reads). ``--list`` prints each stage's modules, largest first.

    python benchmarks/import_modules.py [--repeats 3] [--list]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

# Run in a fresh interpreter: which modules a stage adds is the point.
_STAGES = """
import contextlib, io, json, os, sys, tempfile
import torch

def trainmesh_modules():
    found = {}
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if name.split(".")[0] == "trainmesh" and path:
            found[name] = path
    return found

stages = {}
import trainmesh as tm
tm.Trainer
stages["import trainmesh; tm.Trainer"] = trainmesh_modules()
os.chdir(tempfile.mkdtemp())
tm.Trainer()
stages["+ tm.Trainer()"] = trainmesh_modules()

class Net(tm.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)
    def training_step(self, batch, batch_idx):
        loss = self.layer(batch[0]).pow(2).mean()
        self.log("loss", loss)
        return loss
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(4, 2)), batch_size=2)
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    tm.Trainer(max_steps=1, log_every_n_steps=1, enable_model_summary=False).fit(Net(), loader)
stages["+ a one-step fit"] = trainmesh_modules()
print(json.dumps(stages))
"""


def stages() -> dict[str, dict[str, str]]:
    """Each stage's trainmesh modules (name -> source path), from a fresh interpreter."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    with tempfile.TemporaryDirectory() as folder:
        result = subprocess.run(
            [sys.executable, "-c", _STAGES], capture_output=True, text=True, env=env, cwd=folder, check=True
        )
    return json.loads(result.stdout.splitlines()[-1])


def compile_cpu(paths: list[str], repeats: int) -> float:
    """CPU seconds to compile these sources once (best of ``repeats``)."""
    sources = [(open(path, "rb").read(), path) for path in paths]
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        for source, path in sources:
            compile(source, path, "exec", dont_inherit=True)
        best = min(best, time.process_time() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--list", action="store_true", help="print each stage's modules, largest first")
    args = parser.parse_args()
    for stage, modules in stages().items():
        sizes = {name: os.path.getsize(path) for name, path in modules.items()}
        cpu = compile_cpu(list(modules.values()), args.repeats)
        print(
            f"{stage:28s} {len(modules):4d} trainmesh modules, {sum(sizes.values()) / 1000:7.1f} kB of source, "
            f"compiled in {cpu * 1000:5.1f} ms of CPU"
        )
        if args.list:
            for name, size in sorted(sizes.items(), key=lambda item: -item[1]):
                print(f"    {size / 1000:6.1f} kB  {name}")


if __name__ == "__main__":
    main()
