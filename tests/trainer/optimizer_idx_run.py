"""A Lightning 1.x GAN-style program for test_optimizer_idx: ``training_step(batch, batch_idx,
optimizer_idx)`` with two optimizers, and every optimizer hook in its 1.x signature (optimizer_idx).
The same program ran under pytorch-lightning 1.9.5 (the module's base and Trainer renamed) gave the
weights and call lists the test holds.

python optimizer_idx_run.py --batch SPEC.json   -> legs ``trainer OUT VARIANT STRATEGY DEVICES`` (helpers/batches.py)
"""

import faulthandler
import os
import sys

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import trainmesh as tm  # noqa: E402

SAMPLES, BATCH, EPOCHS, CLIP = 24, 4, 2, 0.5


class Gan(tm.Module):
    """variant: "plain" ([g, d], [scheduler of g]), "freq" (dicts with frequencies 1 and 2, an epoch
    and a step scheduler), "acc" (as plain, under accumulate_grad_batches=2)."""

    def __init__(self, variant: str):
        super().__init__()
        torch.manual_seed(0)
        self.g, self.d = torch.nn.Linear(3, 4), torch.nn.Linear(4, 1)
        self.variant, self.calls = variant, []

    def training_step(self, batch, batch_idx, optimizer_idx):
        x, z = batch
        self.calls.append(("training_step", batch_idx, optimizer_idx))
        if optimizer_idx == 0:
            return F.softplus(-self.d(self.g(z))).mean()
        # no detach: toggle_optimizer keeps the generator's parameters out of this backward
        return F.softplus(-self.d(x)).mean() + F.softplus(self.d(self.g(z))).mean()

    def configure_optimizers(self):
        g = torch.optim.SGD(self.g.parameters(), lr=0.1, momentum=0.9)
        d = torch.optim.Adam(self.d.parameters(), lr=0.01)
        if self.variant == "freq":
            step = torch.optim.lr_scheduler.StepLR
            return [
                # an epoch scheduler of an optimizer not active at the epoch's last batch: 1.x does not step it
                {"optimizer": g, "frequency": 1, "lr_scheduler": {"scheduler": step(g, 1, 0.5), "interval": "epoch"}},
                {"optimizer": d, "frequency": 2, "lr_scheduler": {"scheduler": step(d, 1, 0.8), "interval": "step"}},
            ]
        return [g, d], [torch.optim.lr_scheduler.StepLR(g, 1, 0.5)]

    def on_before_zero_grad(self, optimizer):
        self.calls.append(("on_before_zero_grad", type(optimizer).__name__))

    def optimizer_zero_grad(self, epoch, batch_idx, optimizer, optimizer_idx):
        self.calls.append(("optimizer_zero_grad", batch_idx, optimizer_idx))
        optimizer.zero_grad()

    def backward(self, loss, optimizer, optimizer_idx, *args, **kwargs):
        self.calls.append(("backward", type(optimizer).__name__, optimizer_idx))
        loss.backward(*args, **kwargs)

    def on_before_optimizer_step(self, optimizer, optimizer_idx):
        self.calls.append(("on_before_optimizer_step", type(optimizer).__name__, optimizer_idx))

    def optimizer_step(
        self,
        epoch,
        batch_idx,
        optimizer,
        optimizer_idx,
        optimizer_closure,
        on_tpu=False,
        using_native_amp=False,
        using_lbfgs=False,
    ):
        self.calls.append(("optimizer_step", batch_idx, optimizer_idx, on_tpu, using_lbfgs))
        if optimizer_idx == 0 and self.trainer.global_step < 2:  # a warm-up of the generator
            for group in optimizer.param_groups:
                group["lr"] = 0.1 * (self.trainer.global_step + 1) / 2
        optimizer.step(closure=optimizer_closure)

    def configure_gradient_clipping(
        self, optimizer, optimizer_idx, gradient_clip_val=None, gradient_clip_algorithm=None
    ):
        self.calls.append(("configure_gradient_clipping", optimizer_idx, gradient_clip_val))
        self.clip_gradients(
            optimizer, gradient_clip_val=gradient_clip_val, gradient_clip_algorithm=gradient_clip_algorithm
        )

    def lr_scheduler_step(self, scheduler, optimizer_idx, metric):
        self.calls.append(("lr_scheduler_step", optimizer_idx))
        scheduler.step()


class Recorder(tm.Callback):
    def __init__(self, module):
        self.module = module

    def on_before_optimizer_step(self, trainer, pl_module, optimizer, optimizer_idx):
        self.module.calls.append(("cb.on_before_optimizer_step", optimizer_idx))


def data(devices: int = 1) -> DataLoader:
    generator = torch.Generator().manual_seed(1)
    samples = TensorDataset(torch.randn(SAMPLES, 4, generator=generator), torch.randn(SAMPLES, 3, generator=generator))
    return DataLoader(samples, batch_size=BATCH // devices)


def fit(variant: str, strategy: str = "auto", devices: int = 1) -> tuple[Gan, tm.Trainer]:
    module = Gan(variant)
    trainer = tm.Trainer(
        max_epochs=EPOCHS,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        accelerator="cpu",
        strategy=strategy,
        devices=devices,
        accumulate_grad_batches=2 if variant == "acc" else 1,
        gradient_clip_val=CLIP,
        callbacks=[Recorder(module)],
        num_sanity_val_steps=0,
    )
    trainer.fit(module, data(devices))
    return module, trainer


def run_trainer(out, variant, strategy, devices):
    """Each of ``devices`` processes has its share of each batch of 4 (DistributedSampler's)."""
    module, trainer = fit(variant, strategy, int(devices))
    if trainer.is_global_zero:
        torch.save({"state_dict": module.state_dict(), "global_step": trainer.global_step}, out)


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
