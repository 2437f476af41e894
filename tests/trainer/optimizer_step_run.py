"""Legs of test_automatic_optimization: a learning-rate warm-up written in Lightning's ``optimizer_step``
hook (the pattern of Lightning's docs), and the same schedule in plain torch.

python optimizer_step_run.py trainer OUT STRATEGY DEVICES  -> the Trainer's weights (rank 0 writes OUT)
python optimizer_step_run.py --batch SPEC.json             -> several legs in one launch (helpers/batches.py)
"""

import faulthandler
import os
import sys

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import trainmesh as tm  # noqa: E402
from helpers.models import quiet_trainer, random_classification  # noqa: E402

LR, WARM, EPOCHS, ACCUMULATE, CLIP = 0.2, 4, 2, 2, 0.5
SAMPLES = 96


def network() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))


def sgd(parameters) -> torch.optim.Optimizer:
    return torch.optim.SGD(parameters, lr=LR, momentum=0.9)


def warm_up(optimizer, step: int) -> None:
    """After optimizer step ``step`` (counted from 0), the learning rate of the next one."""
    if step < WARM:
        for group in optimizer.param_groups:
            group["lr"] = min(1.0, (step + 1) / WARM) * LR


class Net(tm.Module):
    def __init__(self):
        super().__init__()
        self.net = network()

    def training_step(self, batch, batch_idx):
        return F.cross_entropy(self.net(batch[0]), batch[1])

    def configure_optimizers(self):
        return sgd(self.parameters())


class WarmUp(Net):
    """Lightning's documented warm-up: the step first, then the next step's learning rate."""

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
        optimizer.step(closure=optimizer_closure)
        warm_up(optimizer, self.trainer.global_step)


def torch_reference(
    *, batch_size: int, accumulate: int = 1, clip: float | None = None, skip=lambda batch_idx: False, warm=True,
    sampler=None,
) -> torch.nn.Module:  # fmt: skip
    """The same training in plain torch: zero_grad at a window's first batch, step at its last
    (``skip(batch_idx)``: not that one), then the warm-up's learning rate (``warm``). ``sampler``
    (a DistributedSampler, set_epoch each epoch): the order to read, in order without one."""
    model = network()
    optimizer = sgd(model.parameters())
    loader = DataLoader(random_classification(SAMPLES), batch_size=batch_size, sampler=sampler)
    step = 0
    for epoch in range(EPOCHS):
        if sampler is not None:
            sampler.set_epoch(epoch)
        for batch_idx, (x, y) in enumerate(loader):
            if batch_idx % accumulate == 0:
                optimizer.zero_grad()
            (F.cross_entropy(model(x), y) / accumulate).backward()
            if (batch_idx + 1) % accumulate == 0 or batch_idx + 1 == len(loader):
                if clip is not None:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
                if not skip(batch_idx):
                    optimizer.step()
                if warm:
                    warm_up(optimizer, step)
                step += 1
    return model


def run_trainer(out, strategy, devices):
    """The warm-up with accumulation and clipping, the batch split over ``devices`` processes."""
    devices = int(devices)
    model = WarmUp()
    trainer = quiet_trainer(
        strategy=strategy,
        devices=devices,
        max_epochs=EPOCHS,
        accumulate_grad_batches=ACCUMULATE,
        gradient_clip_val=CLIP,
    )
    trainer.fit(model, DataLoader(random_classification(SAMPLES), batch_size=16 // devices))
    state = {k: v.full_tensor() if hasattr(v, "full_tensor") else v for k, v in model.state_dict().items()}
    if trainer.is_global_zero:
        torch.save({"state_dict": state, "global_step": trainer.global_step}, out)


# The programs of this file: a leg's argv is NAME ARGS... (tests/helpers/batches.py's dispatch).
PROGRAMS = {"trainer": run_trainer}


def run_mode(argv):
    from helpers.batches import dispatch

    dispatch(PROGRAMS, argv)


if __name__ == "__main__":
    if sys.argv[1] == "--batch":
        from helpers.batches import run_batch

        run_batch(sys.argv[2], run_mode, limit=100)
    else:
        faulthandler.dump_traceback_later(100, exit=True)
        run_mode(sys.argv[1:])
