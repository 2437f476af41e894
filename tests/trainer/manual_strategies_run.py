"""Legs of the manual-optimization tests under every data-parallel strategy: a two-optimizer GAN
that accumulates over two batches (``no_backward_sync``), clips the discriminator
(``self.clip_gradients``) and steps a scheduler per optimizer (``self.lr_schedulers()``).

python manual_strategies_run.py trainer OUT STRATEGY DEVICES [NUM_NODES [MAX_STEPS [CKPT_DIR [RESUME]]]]
python manual_strategies_run.py --batch SPEC.json    -> several legs in one launch (helpers/batches.py)

STRATEGY is a strategy name, or ``hsdp2x2`` (hsdp in shard groups of 2: 2 groups over 4 processes).
The reference, ``reference(world)``, is the same GAN as ``world`` data-parallel ranks train it,
written in plain torch in one process (each rank's gradients kept apart, averaged where DDP
averages them).
"""

import faulthandler
import os
import sys

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler, Subset

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from manual_optimization_run import GAN, PER_RANK_BATCH, networks, noise, optimizers, train_set  # noqa: E402

from helpers.lightning_order import GlobalBatches  # noqa: E402
from helpers.models import quiet_trainer  # noqa: E402

# Six batches per rank: three accumulation windows of two, each ending in two optimizer steps.
BATCHES, ACCUMULATE, CLIP, GAMMA = 6, 2, 0.05, 0.7


def schedulers(opt_g, opt_d):
    return [torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=GAMMA) for opt in (opt_g, opt_d)]


class CheckedGAN(GAN):
    """The GAN with what manual optimization leaves to the module: accumulation, clipping, schedulers."""

    def training_step(self, batch, batch_idx):
        x, _ = batch
        opt_g, opt_d = self.optimizers()
        sched_g, sched_d = self.lr_schedulers()
        assert isinstance(sched_g, torch.optim.lr_scheduler.StepLR)  # what the module made, under every strategy
        z = noise(x.shape[0], batch_idx)
        ones, zeros = torch.ones(x.shape[0], 1), torch.zeros(x.shape[0], 1)
        steps_now = (batch_idx + 1) % ACCUMULATE == 0

        self.toggle_optimizer(opt_g)
        with self.no_backward_sync(enabled=not steps_now):
            g_loss = F.binary_cross_entropy_with_logits(self.discriminator(self(z)), ones)
            self.manual_backward(g_loss / ACCUMULATE)
        self.untoggle_optimizer(opt_g)
        if steps_now:
            opt_g.step()
            opt_g.zero_grad()
            sched_g.step()

        self.toggle_optimizer(opt_d)
        with self._discriminator_sync(steps_now):
            real = F.binary_cross_entropy_with_logits(self.discriminator(x), ones)
            fake = F.binary_cross_entropy_with_logits(self.discriminator(self(z).detach()), zeros)
            self.manual_backward((real + fake) / 2 / ACCUMULATE)
        self.untoggle_optimizer(opt_d)
        if steps_now:
            # Only the discriminator holds gradients here (the generator's were zeroed).
            self.clip_gradients(opt_d, gradient_clip_val=CLIP, gradient_clip_algorithm="norm")
            opt_d.step()
            opt_d.zero_grad()
            sched_d.step()
        self.log("g_loss", g_loss)

    def _discriminator_sync(self, steps_now):
        # Under ddp, Lightning's ParallelStrategy.block_backward_sync() (gradient-cache programs use it:
        # l-progs9 p05b) instead of no_backward_sync: the same DDP no_sync, so the same weights.
        if not steps_now and type(self.trainer.strategy).__name__ == "DDPStrategy":
            return self.trainer.strategy.block_backward_sync()
        return self.no_backward_sync(enabled=not steps_now)

    def configure_optimizers(self):
        opt_g, opt_d = optimizers(self.generator, self.discriminator)
        return [opt_g, opt_d], schedulers(opt_g, opt_d)


class TensorParallelGAN(CheckedGAN):
    """The checked GAN with each network's layers split across the tensor-parallel ranks."""

    def tensor_parallel_plan(self):
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

        return {
            "generator.0": ColwiseParallel(),
            "generator.2": RowwiseParallel(),
            "discriminator.0": ColwiseParallel(),
            "discriminator.2": RowwiseParallel(),
        }


def rank_batches(world: int, rank: int) -> list:
    """What data-parallel rank ``rank`` of ``world`` reads: the Trainer's DistributedSampler shuffles
    every training loader (seed 0: no seed_everything here), as Lightning's."""
    data = train_set()
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=0)
    return [x for _, (x, _) in zip(range(BATCHES), DataLoader(data, batch_size=PER_RANK_BATCH, sampler=sampler))]


def chunked_set(nodes: int, chunks: int) -> Subset:
    """The first batches of the training set, reordered for processes that split their batch into
    ``chunks`` (dp, ddp2): chunk c of node n's batch k is what ddp rank ``chunks * n + c`` reads as
    its batch k. Node n reads positions n, n + nodes, ... (a DistributedSampler, no shuffle)."""
    world, per_batch = nodes * chunks, chunks * PER_RANK_BATCH
    order = [0] * (nodes * BATCHES * per_batch)
    for n in range(nodes):
        for j in range(BATCHES * per_batch):
            k, rest = divmod(j, per_batch)
            c, i = divmod(rest, PER_RANK_BATCH)
            order[n + nodes * j] = (chunks * n + c) + world * (k * PER_RANK_BATCH + i)
    return Subset(train_set(), order)


class _Ranks:
    """Each simulated rank's own ``.grad`` of every parameter, swapped in around its backward."""

    def __init__(self, world: int, params: list) -> None:
        self.world, self.params = world, params
        self.grads = [dict.fromkeys(range(len(params))) for _ in range(world)]

    def backward(self, rank: int, loss: torch.Tensor) -> None:
        for i, p in enumerate(self.params):
            p.grad = self.grads[rank][i]
        loss.backward()  # accumulates into this rank's gradients, as autograd does on the rank
        for i, p in enumerate(self.params):
            self.grads[rank][i] = p.grad
        for p in self.params:
            p.grad = None

    def average(self) -> None:
        """DDP's all-reduce at a synchronised backward: every gradient a rank holds (not only the
        ones this loss reached: DDP's buckets carry the others' accumulated ones too) times
        1/world, summed; every rank then holds the result."""
        for i in range(len(self.params)):
            if self.grads[0][i] is None:
                continue
            total = sum(self.grads[r][i] * (1.0 / self.world) for r in range(1, self.world))
            mean = self.grads[0][i] * (1.0 / self.world) + total
            for r in range(self.world):
                self.grads[r][i] = mean.clone()

    def zero(self, owned: list) -> None:
        for i, p in enumerate(self.params):
            if any(p is q for q in owned):
                for r in range(self.world):
                    self.grads[r][i] = None

    def load(self) -> None:
        """Rank 0's gradients into ``.grad`` (every rank holds the same after the average)."""
        for i, p in enumerate(self.params):
            p.grad = self.grads[0][i]


def reference(world: int, *, clip: float | None = CLIP) -> dict:
    """The checked GAN as ``world`` data-parallel ranks train it, in plain torch in one process."""
    generator, discriminator = networks()
    opt_g, opt_d = optimizers(generator, discriminator)
    sched_g, sched_d = schedulers(opt_g, opt_d)
    g_params, d_params = list(generator.parameters()), list(discriminator.parameters())
    ranks = _Ranks(world, g_params + d_params)
    data = [rank_batches(world, r) for r in range(world)]
    for batch_idx in range(BATCHES):
        steps_now = (batch_idx + 1) % ACCUMULATE == 0
        z = noise(PER_RANK_BATCH, batch_idx)
        ones, zeros = torch.ones(PER_RANK_BATCH, 1), torch.zeros(PER_RANK_BATCH, 1)
        for p in d_params:  # toggle_optimizer(opt_g)
            p.requires_grad_(False)
        for r in range(world):
            g_loss = F.binary_cross_entropy_with_logits(discriminator(generator(z)), ones)
            ranks.backward(r, g_loss / ACCUMULATE)
        for p in d_params:
            p.requires_grad_(True)
        if steps_now:
            ranks.average()
            ranks.load()
            opt_g.step()
            ranks.zero(g_params)
            sched_g.step()
        for p in g_params:  # toggle_optimizer(opt_d)
            p.requires_grad_(False)
        for r in range(world):
            x = data[r][batch_idx]
            real = F.binary_cross_entropy_with_logits(discriminator(x), ones)
            fake = F.binary_cross_entropy_with_logits(discriminator(generator(z).detach()), zeros)
            ranks.backward(r, (real + fake) / 2 / ACCUMULATE)
        for p in g_params:
            p.requires_grad_(True)
        if steps_now:
            ranks.average()
            ranks.load()
            if clip is not None:
                torch.nn.utils.clip_grad_norm_([*g_params, *d_params], clip)
            opt_d.step()
            ranks.zero(d_params)
            sched_d.step()
        for p in g_params + d_params:
            p.grad = None
    state = {
        **{f"generator.{k}": v for k, v in generator.state_dict().items()},
        **{f"discriminator.{k}": v for k, v in discriminator.state_dict().items()},
    }
    return {"state_dict": state, "lrs": [sched_g.get_last_lr()[0], sched_d.get_last_lr()[0]]}


def _strategy(name: str):
    if name == "hsdp2x2":
        from trainmesh.strategies import FSDPStrategy

        return FSDPStrategy(shard_size=2)
    return name


def run_trainer(out, strategy, devices, num_nodes="1", max_steps="-1", ckpt_dir=None, resume=None):
    from trainmesh.callbacks import ModelCheckpoint

    callbacks = [ModelCheckpoint(dirpath=ckpt_dir, save_last=True, save_top_k=0)] if ckpt_dir else None
    chunks = int(devices) if strategy in ("dp", "ddp2") else 1
    trainer = quiet_trainer(
        strategy=_strategy(strategy),
        devices=int(devices),
        num_nodes=int(num_nodes),
        max_steps=int(max_steps),
        max_epochs=1,
        limit_train_batches=BATCHES,
        callbacks=callbacks,
        enable_checkpointing=bool(ckpt_dir),
        exact_resume=True,  # resumed == uninterrupted (a named ckpt_path resumes as Lightning otherwise)
    )
    model = TensorParallelGAN() if strategy in ("tp", "fsdp_tp") else CheckedGAN()
    loader = DataLoader(train_set(), batch_size=PER_RANK_BATCH)
    if strategy in ("dp", "ddp2", "layers_on_devices"):
        # A process splitting its batch (or its model): node n's chunk c of batch k is what rank
        # chunks * n + c reads (rank_batches), a sampler the Trainer keeps. ddp2's nodes run under
        # torchrun, one process each, whose RANK is the node's (the Trainer's ranks are known at fit).
        node = int(os.environ.get("RANK", "0"))
        ranks = range(node * chunks, (node + 1) * chunks)
        order = GlobalBatches(len(train_set()), world=int(num_nodes) * chunks, batch_size=PER_RANK_BATCH, ranks=ranks)
        loader = DataLoader(train_set(), batch_size=PER_RANK_BATCH * chunks, sampler=order)
    trainer.fit(
        model,
        loader,
        ckpt_path=os.path.join(ckpt_dir, "last.ckpt") if resume else None,
    )
    state = {k: v.full_tensor() if hasattr(v, "full_tensor") else v for k, v in model.state_dict().items()}
    if trainer.is_global_zero:
        lrs = [s.get_last_lr()[0] for s in model.lr_schedulers()]
        torch.save({"state_dict": state, "global_step": trainer.global_step, "lrs": lrs}, out)


def run_refused(out, strategy, devices):
    """refused OUT STRATEGY DEVICES: fit's refusal of the checked GAN, and whether it trained."""
    model = CheckedGAN()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = quiet_trainer(strategy=strategy, devices=int(devices), max_epochs=1, limit_train_batches=BATCHES)
    try:
        trainer.fit(model, DataLoader(train_set(), batch_size=PER_RANK_BATCH))
        error = None
    except ValueError as refusal:
        error = str(refusal)
    if trainer.is_global_zero:
        untouched = all(torch.equal(before[k], v) for k, v in model.state_dict().items() if k in before)
        torch.save({"error": error, "untouched": untouched, "global_step": trainer.global_step}, out)


# The programs of this file: a leg's argv is NAME ARGS... (tests/helpers/batches.py's dispatch).
PROGRAMS = {"trainer": run_trainer, "refused": run_refused}


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
