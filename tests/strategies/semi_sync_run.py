"""The program of test_semi_sync.py: one replica group, running seven trainings one after the other,
each against its own lighthouse (one launch shared by every check).

python semi_sync_run.py OUT LIGHTHOUSES GROUP

LIGHTHOUSES: seven addresses, comma-separated, one per training (a Manager that was shut down keeps
heartbeating to its lighthouse a while, and the next training's quorum would wait for it).

1. the Trainer with ``FaultTolerance(sync="diloco", sync_every=3)``, Adam inside, 12 steps; each
   group saves a checkpoint after step 7 (mid-interval: one local step after the second sync);
2. the reference: the same model, data and steps in a hand-written loop around torchft's own DiLoCo;
3. the Trainer with ``FaultTolerance(sync="local_sgd", sync_every=1)``, plain SGD, 6 steps;
4. training 1 resumed by each group from its own step-7 checkpoint, to step 12, in a module built
   from another seed;
5. Streaming DiLoCo: the Trainer with ``fragments=2``, ``sync_every=4`` (a fragment every 2 steps),
   Adam inside, 12 steps; each group saves a checkpoint after step 7 (one local step after the
   sync of fragment 1 at step 6);
6. its reference: training 5 in a hand-written loop around torchft's DiLoCo over the two Linear
   layers as fragments, one outer optimizer each;
7. training 5 resumed by each group from its own step-7 checkpoint, to step 12, in a module built
   from another seed.
Each writes the group's final weights to OUT/<name>_GROUP.pt.
"""

import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import trainmesh as tm

DILOCO_STEPS, DILOCO_EVERY = 12, 3
LOCAL_SGD_STEPS, SGD_LR = 6, 0.1
CHECKPOINT_STEP = 7  # between the syncs after steps 6 and 9
STREAMING_EVERY = 4  # with 2 fragments: one synced every 2 steps
TIMEOUT = timedelta(seconds=60)


def dataset() -> TensorDataset:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(256, 8, generator=gen)
    return TensorDataset(x, x[:, :2].sum(1, keepdim=True))


def layers(seed: int) -> torch.nn.Sequential:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


class Net(tm.Module):
    def __init__(self, seed: int, optimizer: str):
        super().__init__()
        self.net, self.optimizer = layers(seed), optimizer

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        if self.optimizer == "adam":
            return torch.optim.Adam(self.parameters(), lr=1e-2)
        return torch.optim.SGD(self.parameters(), lr=SGD_LR)


class SaveAt(tm.Callback):
    """Saves the group's checkpoint once the loop reaches ``step`` (as a user's own callback would)."""

    def __init__(self, step: int, path: Path):
        self.step, self.path = step, path

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            trainer.save_checkpoint(str(self.path))


def trainer_run(
    out: Path, lighthouse: str, group: int, *, sync: str, every: int, steps: int, optimizer: str, name: str = "",
    resume: Path | None = None, callbacks: tuple = (), fragments: int = 1,
) -> None:  # fmt: skip
    ft = tm.FaultTolerance(
        lighthouse, replica_group=group, num_replica_groups=2, host="127.0.0.1", timeout=TIMEOUT, sync=sync,
        sync_every=every, fragments=fragments,
    )  # fmt: skip
    trainer = tm.Trainer(
        accelerator="cpu",
        devices=1,
        strategy="ddp",
        fault_tolerance=ft,
        max_steps=steps,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        callbacks=list(callbacks),
        default_root_dir=str(out / f"{name or sync}{group}"),
        exact_resume=True,  # a mid-interval resume continues exactly (trainmesh's own strategy)
    )
    # Group 1 from another seed: it must start from group 0's (a resumed run: from its checkpoint).
    model = Net(seed=(100 if resume else 3) + group, optimizer=optimizer)
    trainer.fit(model, DataLoader(dataset(), batch_size=8, shuffle=False), ckpt_path=resume)
    torch.save(model.net.state_dict(), out / f"trainer_{name or sync}_{group}.pt")


def reference_diloco(out: Path, lighthouse: str, group: int, fragments: int = 1) -> None:
    """torchft's DiLoCo as its own example uses it: a Manager per group, the inner optimizer stepped
    by hand, DiLoCo's hooks syncing every DILOCO_EVERY steps; both groups built from the same seed."""
    from torchft import Manager, ProcessGroupGloo
    from torchft.local_sgd import DiLoCo

    model = layers(3)
    inner = torch.optim.Adam(model.parameters(), lr=1e-2)
    pieces = [model] if fragments == 1 else [model[0], model[2]]  # Streaming DiLoCo: the two Linear layers
    outers = [torch.optim.SGD(piece.parameters(), lr=0.7, momentum=0.9, nesterov=True) for piece in pieces]
    store = torch.distributed.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    manager = Manager(
        pg=ProcessGroupGloo(timeout=TIMEOUT),
        load_state_dict=lambda state: model.load_state_dict(state),
        state_dict=lambda: model.state_dict(),
        min_replica_size=1,
        replica_id=f"trainmesh_{group}",
        lighthouse_addr=lighthouse,
        store_addr="127.0.0.1",
        store_port=store.port,
        hostname="127.0.0.1",
        rank=0,
        world_size=1,
        timeout=TIMEOUT,
        quorum_timeout=TIMEOUT,
        connect_timeout=TIMEOUT,
        use_async_quorum=False,
        init_sync=False,
    )
    data = dataset()
    # The group's share as the Trainer deals it: shuffled with the seed (0: no seed_everything).
    sampler = DistributedSampler(data, num_replicas=2, rank=group, shuffle=True, seed=0)
    sampler.set_epoch(0)  # the 12 steps stay in epoch 0 (16 batches of 8 per group)
    batches = iter(DataLoader(data, batch_size=8, sampler=sampler))
    every = DILOCO_EVERY if fragments == 1 else STREAMING_EVERY
    with DiLoCo(manager, pieces, inner, outers if fragments > 1 else outers[0], sync_every=every):
        for _ in range(DILOCO_STEPS):
            x, y = next(batches)
            inner.zero_grad()
            F.mse_loss(model(x), y).backward()
            inner.step()
    manager.shutdown(wait=False)
    torch.save(model.state_dict(), out / f"reference_{'streaming' if fragments > 1 else 'diloco'}_{group}.pt")


def main(out: str, lighthouses: str, group: str) -> None:
    out_dir, g = Path(out), int(group)
    first, second, third, fourth, fifth, sixth, seventh = lighthouses.split(",")
    checkpoint = out_dir / f"mid_{g}.ckpt"
    diloco = dict(sync="diloco", every=DILOCO_EVERY, steps=DILOCO_STEPS, optimizer="adam")
    trainer_run(out_dir, first, g, **diloco, callbacks=(SaveAt(CHECKPOINT_STEP, checkpoint),))
    reference_diloco(out_dir, second, g)
    trainer_run(out_dir, third, g, sync="local_sgd", every=1, steps=LOCAL_SGD_STEPS, optimizer="sgd")
    trainer_run(out_dir, fourth, g, **diloco, name="resumed_diloco", resume=checkpoint)
    streaming = dict(sync="diloco", every=STREAMING_EVERY, steps=DILOCO_STEPS, optimizer="adam", fragments=2)
    streaming_checkpoint = out_dir / f"mid_streaming_{g}.ckpt"
    trainer_run(out_dir, fifth, g, **streaming, name="streaming", callbacks=(SaveAt(7, streaming_checkpoint),))
    reference_diloco(out_dir, sixth, g, fragments=2)
    trainer_run(out_dir, seventh, g, **streaming, name="resumed_streaming", resume=streaming_checkpoint)


if __name__ == "__main__":
    main(*sys.argv[1:])
