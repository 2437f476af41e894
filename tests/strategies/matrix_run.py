"""One leg of the strategy matrix: every cell of one strategy, in one process group.

python matrix_run.py STRATEGY OUTDIR [CELLS]
python matrix_run.py --batch LEGS.json   (a list of [STRATEGY, OUTDIR, CELLS or null], one world size,
                                          started as ddp, or ddp_fork where the harness forked it)
  The batch form runs the legs one after another in the same processes (one launch, one process
  group): starting the interpreters of each leg was most of its time. A leg that fails writes
  its traceback to OUTDIR/error-RANK and ends the launch; a leg that ran to its end leaves
  OUTDIR/complete.

A cell is an entry point (the Trainer; a Runtime loop with the optimizer built before
``setup``; a Runtime loop with the optimizer built after ``setup_module``) times a model kind
(a torch module with BatchNorm and dropout; a Keras 3 model wrapped in a Module). Rank 0 writes
``OUTDIR/<entry>-<kind>.pt`` holding the trained weights, or the error that refused the cell.
``plain`` is the hand-written one-process PyTorch loop that ``single`` is compared with.

Every cell sees the same global batches split the same way as its reference: dp and ddp2
read the data in an order whose chunk c of batch k is what ddp rank c (node-major for ddp2)
reads as its batch k from the Trainer's shuffling sampler, so BatchNorm's per-device statistics
and dropout masks can match.
"""

import faulthandler
import json
import os
import random
import sys
import traceback
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "torch")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import trainmesh as tm  # noqa: E402
from helpers.forked import single_threaded  # noqa: E402
from helpers.lightning_order import GlobalBatches  # noqa: E402
from helpers.models import quiet_trainer  # noqa: E402

EPOCHS, PER_DEVICE_BATCH, SAMPLES, LR = 2, 16, 128, 1e-2
ENTRIES = ("trainer", "runtime_before", "runtime_after")
KINDS = ("torch", "keras")

# strategy -> (processes per node, nodes, devices each process splits its batch across)
LAYOUTS = {
    "single": (1, 1, 1),
    "plain": (1, 1, 1),
    "ddp": (2, 1, 1),
    "ddp_spawn": (2, 1, 1),
    "ddp_fork": (2, 1, 1),
    "dp": (1, 1, 2),
    "ddp2": (1, 2, 2),
    "zero1": (2, 1, 1),
    "sharded": (2, 1, 1),
    "fsdp": (2, 1, 1),
    "hsdp": (4, 1, 1),
    "ddp4": (4, 1, 1),
}


def dataset() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, 16, generator=g)
    return TensorDataset(x, (x[:, :4].argmax(1) + (x[:, 5] > 1).long()) % 4)


def loader_for(strategy: str) -> DataLoader:
    processes, nodes, chunks = LAYOUTS[strategy]
    data = dataset()
    if chunks > 1:
        # Node n's chunk c of batch k: what ddp rank chunks*n + c (of nodes*chunks) reads as its batch k
        # from the Trainer's distributed sampler (helpers/lightning_order.py); ddp2's nodes run under
        # torchrun, one process each, whose RANK is the node's.
        node = int(os.environ.get("RANK", "0"))
        ranks = range(node * chunks, node * chunks + chunks)
        order = GlobalBatches(SAMPLES, world=nodes * chunks, batch_size=PER_DEVICE_BATCH, ranks=ranks)
        return DataLoader(data, batch_size=PER_DEVICE_BATCH * chunks, sampler=order)
    batch = PER_DEVICE_BATCH * (2 if strategy in ("single", "plain") else 1)
    # Several processes: shuffled, so that a Runtime loop's sampler (shuffling a RandomSampler's loader
    # only, as Lightning's Fabric) reads what the Trainer's reads (every training loader shuffled)
    return DataLoader(data, batch_size=batch, shuffle=processes > 1)


def build_net(kind: str) -> torch.nn.Module:
    random.seed(0)
    torch.manual_seed(0)
    if kind == "torch":
        return torch.nn.Sequential(
            torch.nn.Linear(16, 32),
            torch.nn.ReLU(),
            torch.nn.BatchNorm1d(32),
            torch.nn.Dropout(0.25),
            torch.nn.Linear(32, 4),
        )
    import keras

    # Layer names restart: every cell's weights have the same keys. No gc.collect (free_memory):
    # it scans the whole heap this fork made (Keras and Lightning included), 0.1-0.3 CPU-s a cell.
    keras.backend.clear_session(free_memory=False)
    keras.utils.set_random_seed(0)
    return keras.Sequential(
        [
            keras.Input((16,)),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.BatchNormalization(),
            keras.layers.Dropout(0.25),
            keras.layers.Dense(4),
        ]
    )


class MatrixModule(tm.Module):
    def __init__(self, kind: str):
        super().__init__()
        self.keras = kind == "keras"
        self.net = build_net(kind)

    def forward(self, x):
        # Keras layers follow training=, not train()/eval(): pass the module's mode on.
        return self.net(x, training=self.training) if self.keras else self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=LR)


def trainer_cell(strategy: str, kind: str, path: Path) -> None:
    processes, nodes, chunks = LAYOUTS[strategy]
    devices = chunks if strategy in ("dp", "ddp2") else processes
    name = "ddp" if strategy == "ddp4" else strategy
    trainer = quiet_trainer(strategy=name, devices=devices, num_nodes=nodes, max_epochs=EPOCHS)
    module = MatrixModule(kind)
    trainer.fit(module, loader_for(strategy))
    trainer.runtime.save(str(path), {"model": module})


def runtime_cell(strategy: str, kind: str, path: Path, *, optimizer_first: bool) -> None:
    processes, nodes, chunks = LAYOUTS[strategy]
    devices = chunks if strategy in ("dp", "ddp2") else processes
    runtime = tm.Runtime(accelerator="cpu", strategy=strategy, devices=devices, num_nodes=nodes)

    def loop():
        module = MatrixModule(kind)
        if optimizer_first:  # the README's pattern: the optimizer exists before setup
            model, optimizer = runtime.setup(module, torch.optim.Adam(module.parameters(), lr=LR))
        else:
            model = runtime.setup_module(module)
            optimizer = runtime.setup_optimizers(torch.optim.Adam(model.parameters(), lr=LR))[0]
        loader = runtime.setup_dataloaders(loader_for(strategy))
        model.train()
        for epoch in range(EPOCHS):
            loader.set_epoch(epoch)
            for x, y in loader:
                optimizer.zero_grad()
                runtime.backward(F.cross_entropy(model(x), y))
                optimizer.step()
        runtime.save(str(path), {"model": module})

    runtime.launch(loop)


def runtime_before_cell(strategy: str, kind: str, path: Path) -> None:
    """A Runtime loop whose optimizer exists before setup (the README's pattern)."""
    runtime_cell(strategy, kind, path, optimizer_first=True)


def runtime_after_cell(strategy: str, kind: str, path: Path) -> None:
    """A Runtime loop that sets up the module, then makes its optimizer."""
    runtime_cell(strategy, kind, path, optimizer_first=False)


# The programs of a cell ENTRY-KIND under a strategy: the entry's function on the KIND of model
# (ENTRIES, in order); the strategy "plain" runs plain_cell alone.
PROGRAMS = {"trainer": trainer_cell, "runtime_before": runtime_before_cell, "runtime_after": runtime_after_cell}


def plain_cell(kind: str, path: Path) -> None:
    """The hand-written one-process loop: PyTorch alone."""
    module = MatrixModule(kind)
    optimizer = torch.optim.Adam(module.parameters(), lr=LR)
    loader = loader_for("plain")
    module.train()
    for _ in range(EPOCHS):
        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(module(x), y).backward()
            optimizer.step()
    torch.save({"model": module.state_dict()}, path)


def run_cells(strategy: str, outdir: Path, cells: list[str]) -> None:
    rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    for cell in cells:
        entry, kind = cell.split("-")
        path = outdir / f"{cell}.pt"
        try:
            if strategy == "plain":
                plain_cell(kind, path)
            else:
                PROGRAMS[entry](strategy, kind, path)
        except (ValueError, TypeError) as refusal:  # a refusal before training: record it, go on
            if rank == 0:
                torch.save({"error": f"{type(refusal).__name__}: {refusal}"}, path)
        if torch.distributed.is_initialized():
            torch.distributed.barrier()


def run_batch(legs: list[tuple[str, Path, list[str]]], limit: int) -> None:
    """Every leg's cells, one leg after another, in this process (group)."""
    rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    for strategy, outdir, cells in legs:
        faulthandler.dump_traceback_later(limit, exit=True)  # per leg: a hang ends the launch
        try:
            run_cells(strategy, outdir, cells)
        except Exception:  # not SystemExit: the agent process ends that way once its workers ran the batch
            (outdir / f"error-{rank}").write_text(traceback.format_exc())
            raise
        if rank == 0:
            (outdir / "complete").write_text("")
    faulthandler.cancel_dump_traceback_later()


def all_cells(strategy: str) -> list[str]:
    return [f"{e}-{k}" for k in KINDS for e in ENTRIES]


def main() -> None:
    limit = int(os.environ.get("LEG_WATCHDOG_S", "240"))
    if sys.argv[1] == "--batch":
        legs = [
            (strategy, Path(outdir), cells or all_cells(strategy))
            for strategy, outdir, cells in json.loads(Path(sys.argv[2]).read_text())
        ]
        assert len({LAYOUTS[strategy][0] * LAYOUTS[strategy][1] for strategy, _, _ in legs}) == 1, legs
        strategy = legs[0][0]
        processes, nodes, _ = LAYOUTS[strategy]
        if processes * nodes == 1:
            run_batch(legs, limit)
            return
        # Forks (where the harness forked this process: helpers/batches.py's WORKERS) or torchrun's
        # new interpreters. A fork has no watchdog thread, and would wait for it forever in its
        # own first dump_traceback_later: the harness's timeout ends a forked batch.
        start = "ddp_fork" if os.environ.get("TESTS_WORKERS") == "fork" else "ddp"
        if (
            start == "ddp_fork"
        ):  # imported once for every fork (2.9 s of CPU each); with one OpenMP thread it starts none
            import keras  # noqa: F401

            if not single_threaded():  # another thread's held lock would be copied held into the forks
                start = "ddp"
        if start == "ddp":  # the agent process waits here for the whole batch
            faulthandler.dump_traceback_later(limit * len(legs), exit=True)
        outer = tm.Runtime(accelerator="cpu", strategy=start, devices=processes, num_nodes=nodes)
        outer.launch(run_batch, legs, limit)
        return
    faulthandler.dump_traceback_later(limit, exit=True)
    strategy, outdir = sys.argv[1], Path(sys.argv[2])
    cells = sys.argv[3].split(",") if len(sys.argv) > 3 else all_cells(strategy)
    processes, nodes, chunks = LAYOUTS[strategy]
    if processes * nodes == 1:
        run_cells(strategy, outdir, cells)
        return
    # One process group for every cell: made here, used as it is by each cell's Trainer/Runtime.
    start = "ddp_spawn" if strategy == "ddp_spawn" else "ddp_fork" if strategy == "ddp_fork" else "ddp"
    outer = tm.Runtime(accelerator="cpu", strategy=start, devices=processes, num_nodes=nodes)
    outer.launch(run_cells, strategy, outdir, cells)


if __name__ == "__main__":
    main()
