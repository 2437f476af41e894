"""Lightning's strategy arguments trained, world size 2 (legs of one launch, helpers/batches.py).

python lightning_arguments_run.py ddp_hook OUT     -> DDPStrategy(ddp_comm_hook=fp16_compress_hook) through the Trainer
python lightning_arguments_run.py torch_hook OUT   -> torch's own DDP with and without that hook, same data and steps
python lightning_arguments_run.py fsdp SPELLING OUT -> FSDP2 ZeRO-2 with block units and activation checkpointing,
                                                     spelled as Lightning (``lightning``) or trainmesh (``ours``)
"""

import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from ddp_run import EPOCHS, PER_RANK_BATCH, Net, dataset, net  # noqa: E402

import trainmesh as tm  # noqa: E402
from helpers.models import quiet_trainer  # noqa: E402
from trainmesh.strategies import DDPStrategy, FSDPStrategy  # noqa: E402


def fp16_hook():
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    return default_hooks.fp16_compress_hook


def run_ddp_hook(out):
    trainer = quiet_trainer(strategy=DDPStrategy(ddp_comm_hook=fp16_hook()), devices=2, max_epochs=EPOCHS)
    model = Net()
    trainer.fit(model, DataLoader(dataset(), batch_size=PER_RANK_BATCH))
    if trainer.is_global_zero:
        torch.save({"state_dict": model.state_dict()}, out)


def _torch_ddp(hook):
    """The seed's hand-written loop (ddp_run.handwritten_worker) in this launch's process group."""
    rank = dist.get_rank()
    data = dataset()
    # Shuffled with seed 0 (set_epoch below), as the Trainer's sampler deals every training loader
    sampler = torch.utils.data.DistributedSampler(data, num_replicas=2, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=PER_RANK_BATCH, sampler=sampler)
    model = torch.nn.parallel.DistributedDataParallel(net())
    if hook is not None:
        model.register_comm_hook(state=None, hook=hook)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
    return {f"net.{k}": v.detach().clone() for k, v in model.module.state_dict().items()}


def run_torch_hook(out):
    hooked, plain = _torch_ddp(fp16_hook()), _torch_ddp(None)
    if dist.get_rank() == 0:
        torch.save({"hooked": hooked, "plain": plain}, out)
    dist.barrier()


class Block(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.linear = torch.nn.Linear(width, width)

    def forward(self, x):
        return torch.tanh(self.linear(x))


class Blocks(tm.Module):
    def __init__(self, width=32, depth=3):
        super().__init__()
        torch.manual_seed(11)
        self.blocks = torch.nn.ModuleList([Block(width) for _ in range(depth)])
        self.head = torch.nn.Linear(width, 4)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)

    def training_step(self, batch, batch_idx):
        return F.cross_entropy(self(batch[0]), batch[1])

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)


def blocks_data(n=256):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(n, 32, generator=g)
    return TensorDataset(x, x[:, :4].argmax(1))


def run_fsdp(spelling, out):
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper
    from torch.distributed.fsdp import FSDPModule

    if spelling == "lightning":
        strategy = FSDPStrategy(
            auto_wrap_policy={Block},
            activation_checkpointing_policy={Block},
            sharding_strategy="SHARD_GRAD_OP",
            state_dict_type="full",
        )
    else:
        strategy = FSDPStrategy(wrap=[Block], reshard_after_forward=False, activation_checkpointing=[Block])
    seen = SeenAtSave()
    trainer = quiet_trainer(strategy=strategy, devices=2, max_steps=12, callbacks=[seen])
    model = Blocks()
    loader = DataLoader(blocks_data(), batch_size=PER_RANK_BATCH)
    trainer.fit(model, loader)
    placed = trainer.model
    facts = {
        "units": sum(isinstance(m, FSDPModule) for m in placed.modules()),
        "checkpointed": sum(isinstance(m, CheckpointWrapper) for m in placed.modules()),
        "reshard_after_forward": trainer.strategy.reshard_after_forward,
    }
    path = Path(out).with_suffix(".ckpt")
    trainer.save_checkpoint(path)
    state = trainer.full_state_dict()
    checks = resume_checks(trainer, model, loader, path) if spelling == "ours" else {}
    seen_by_rank = trainer.runtime.all_gather_object(seen.entries)
    if trainer.is_global_zero:
        saved = torch.load(path, weights_only=True)["state_dict"] if path.is_file() else None
        torch.save(
            {"state_dict": state, "facts": facts, "file": path.is_file(), "saved": saved, "seen": seen_by_rank}
            | checks,
            out,
        )


class SeenAtSave(tm.Callback):
    """How many weights and optimizer states ``on_save_checkpoint`` sees on this rank."""

    def __init__(self):
        self.entries = []

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        self.entries.append(
            (len(checkpoint["state_dict"]), [len(o.get("state", {})) for o in checkpoint["optimizer_states"]])
        )


def resume_checks(trainer, model, loader, path):
    """A resume of the full file (fit ends at once: max_steps reached) counting whole-model gathers, then a
    file whose head has another shape, which every rank must refuse before loading anything."""
    from trainmesh.strategies import checkpoint as checkpoints

    gathers, shard = [], checkpoints.sharded_state_dict

    def counted(module, optimizers, *, sharded, **kwargs):
        gathers.extend([] if sharded else [len(optimizers)])
        return shard(module, optimizers, sharded=sharded, **kwargs)

    checkpoints.sharded_state_dict = counted
    try:
        trainer.fit(model, loader, ckpt_path=path)
    finally:
        checkpoints.sharded_state_dict = shard
    bad = path.with_name(path.stem + "-wider.ckpt")
    if trainer.is_global_zero:
        saved = torch.load(path, weights_only=False)
        saved["state_dict"]["head.weight"] = torch.zeros(5, 32)
        torch.save(saved, bad)
    trainer.strategy.barrier()
    try:
        trainer.fit(model, loader, ckpt_path=bad)
        refused = None
    except ValueError as exc:
        refused = str(exc)
    gathered = trainer.runtime.all_gather_object((gathers, refused))
    return {"gathers_at_resume": [g for g, _ in gathered], "refused": [r for _, r in gathered]}


PROGRAMS = {"ddp_hook": run_ddp_hook, "torch_hook": run_torch_hook, "fsdp": run_fsdp}


def run_mode(argv):
    from helpers.batches import dispatch

    dispatch(PROGRAMS, argv)


if __name__ == "__main__":
    import faulthandler

    watchdog = int(os.environ.get("LEG_WATCHDOG_S", "100"))
    if sys.argv[1] == "--batch":
        from helpers.batches import run_batch

        run_batch(sys.argv[2], run_mode, limit=watchdog)
    else:
        faulthandler.dump_traceback_later(watchdog, exit=True)
        run_mode(sys.argv[1:])
