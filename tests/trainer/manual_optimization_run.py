"""Legs of the manual-optimization tests: a two-optimizer GAN on the bundled digits.

python manual_optimization_run.py trainer OUT STRATEGY DEVICES [MAX_STEPS [CKPT_DIR [RESUME]]]
python manual_optimization_run.py handwritten OUT      -> the same GAN, torch DDP by hand, 2 processes
python manual_optimization_run.py --batch SPEC.json    -> several legs in one launch (helpers/batches.py)
"""

import faulthandler
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import trainmesh as tm  # noqa: E402
from helpers.models import quiet_trainer  # noqa: E402
from trainmesh.data import DigitsDataModule  # noqa: E402

PER_RANK_BATCH, BATCHES, LATENT = 16, 6, 8


def train_set():
    dm = DigitsDataModule(batch_size=PER_RANK_BATCH)
    dm.setup("fit")
    return dm.train_set


def noise(n, batch_idx):
    # From the batch index, not the global RNG: the hand-written loop draws the same z.
    return torch.randn(n, LATENT, generator=torch.Generator().manual_seed(1000 + batch_idx))


def networks():
    torch.manual_seed(3)
    generator = torch.nn.Sequential(
        torch.nn.Linear(LATENT, 32), torch.nn.ReLU(), torch.nn.Linear(32, 64), torch.nn.Sigmoid()
    )
    discriminator = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.LeakyReLU(0.2), torch.nn.Linear(32, 1))
    return generator, discriminator


def optimizers(generator, discriminator):
    return (
        torch.optim.Adam(generator.parameters(), lr=2e-3, betas=(0.5, 0.999)),
        torch.optim.Adam(discriminator.parameters(), lr=2e-3, betas=(0.5, 0.999)),
    )


class GAN(tm.Module):
    """The Lightning basic-GAN tutorial's training_step, ported by name only."""

    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        self.generator, self.discriminator = networks()

    def forward(self, z):
        return self.generator(z)

    def training_step(self, batch, batch_idx):
        x, _ = batch
        opt_g, opt_d = self.optimizers()
        z = noise(x.shape[0], batch_idx)
        ones, zeros = torch.ones(x.shape[0], 1), torch.zeros(x.shape[0], 1)

        self.toggle_optimizer(opt_g)
        g_loss = F.binary_cross_entropy_with_logits(self.discriminator(self(z)), ones)
        self.manual_backward(g_loss)
        opt_g.step()
        opt_g.zero_grad()
        self.untoggle_optimizer(opt_g)

        self.toggle_optimizer(opt_d)
        real = F.binary_cross_entropy_with_logits(self.discriminator(x), ones)
        fake = F.binary_cross_entropy_with_logits(self.discriminator(self(z).detach()), zeros)
        d_loss = (real + fake) / 2
        self.manual_backward(d_loss)
        opt_d.step()
        opt_d.zero_grad()
        self.untoggle_optimizer(opt_d)
        self.log_dict({"g_loss": g_loss, "d_loss": d_loss}, prog_bar=True)

    def configure_optimizers(self):
        return list(optimizers(self.generator, self.discriminator))


def run_trainer(out, strategy, devices, max_steps=2 * BATCHES, ckpt_dir=None, resume=None):
    from trainmesh.callbacks import ModelCheckpoint

    callbacks = [ModelCheckpoint(dirpath=ckpt_dir, save_last=True, save_top_k=0)] if ckpt_dir else None
    trainer = quiet_trainer(
        strategy=strategy,
        devices=int(devices),
        max_steps=int(max_steps),
        max_epochs=1,
        limit_train_batches=BATCHES,
        callbacks=callbacks,
        enable_checkpointing=bool(ckpt_dir),
        exact_resume=True,  # resumed == uninterrupted (a named ckpt_path resumes as Lightning otherwise)
    )
    model = GAN()
    trainer.fit(
        model,
        DataLoader(train_set(), batch_size=PER_RANK_BATCH),
        ckpt_path=os.path.join(ckpt_dir, "last.ckpt") if resume else None,
    )
    state = {k: v.full_tensor() if hasattr(v, "full_tensor") else v for k, v in model.state_dict().items()}
    if trainer.is_global_zero:
        torch.save(
            {
                "state_dict": state,
                "global_step": trainer.global_step,
                "find_unused": getattr(trainer.model, "find_unused_parameters", None),
            },
            out,
        )


def handwritten_worker(rank, out, port):
    """The same GAN as a plain torch program: two DDP modules, the data split by rank, shuffled with
    seed 0 as the Trainer's sampler shuffles every training loader."""
    faulthandler.dump_traceback_later(90, exit=True)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2, timeout=timedelta(seconds=60)
    )
    data = train_set()
    sampler = torch.utils.data.DistributedSampler(data, num_replicas=2, rank=rank, shuffle=True, seed=0)
    generator, discriminator = networks()
    opt_g, opt_d = optimizers(generator, discriminator)
    generator, discriminator = (
        torch.nn.parallel.DistributedDataParallel(generator),
        torch.nn.parallel.DistributedDataParallel(discriminator),
    )
    for batch_idx, (x, _) in enumerate(DataLoader(data, batch_size=PER_RANK_BATCH, sampler=sampler)):
        if batch_idx == BATCHES:
            break
        z = noise(x.shape[0], batch_idx)
        ones, zeros = torch.ones(x.shape[0], 1), torch.zeros(x.shape[0], 1)
        g_loss = F.binary_cross_entropy_with_logits(discriminator(generator(z)), ones)
        g_loss.backward()
        opt_g.step()
        opt_g.zero_grad()
        opt_d.zero_grad()  # the generator's loss also reached the discriminator
        with torch.no_grad():
            fake_images = generator(z)
        real = F.binary_cross_entropy_with_logits(discriminator(x), ones)
        fake = F.binary_cross_entropy_with_logits(discriminator(fake_images), zeros)
        ((real + fake) / 2).backward()
        opt_d.step()
        opt_d.zero_grad()
    if rank == 0:
        state = {
            **{f"generator.{k}": v for k, v in generator.module.state_dict().items()},
            **{f"discriminator.{k}": v for k, v in discriminator.module.state_dict().items()},
        }
        torch.save({"state_dict": state}, out)
    dist.barrier()
    dist.destroy_process_group()


def run_handwritten(out):
    """handwritten OUT: the GAN as a plain torch program, in two processes (forks where they can
    be, as torch.multiprocessing.spawn would start them otherwise: helpers/forked.py)."""
    from helpers.forked import start_workers
    from trainmesh.launchers.environments import find_free_port

    start_workers(handwritten_worker, (out, find_free_port()), 2, guard_s=100)


# The programs of this file: a leg's argv is NAME ARGS... (tests/helpers/batches.py's dispatch).
PROGRAMS = {"trainer": run_trainer, "handwritten": run_handwritten}


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
