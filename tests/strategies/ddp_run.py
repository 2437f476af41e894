"""Programs of the ddp tests, each a function of the PROGRAMS table (at the end) run as its own
program (ddp re-runs the script it is in): ``python ddp_run.py NAME ARGS...``, for instance

python ddp_run.py trainer OUT [STRATEGY DEVICES NODES]  -> Trainer run; rank 0 saves weights
python ddp_run.py handwritten OUT                       -> the keras-io seed's hand-written DDP loop
python ddp_run.py single OUT                            -> one process, the global batch of 32
python ddp_run.py fail                                  -> rank 1 raises at batch 40
python ddp_run.py evaluate OUT                          -> validate + predict on 1001 samples
python ddp_run.py --batch SPEC.json                     -> several legs of one world size in one launch,
                                                           one after another (see helpers/batches.py)
"""

import faulthandler
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import trainmesh as tm  # noqa: E402
from helpers.forked import start_workers  # noqa: E402
from helpers.lightning_order import GlobalBatches  # noqa: E402
from helpers.models import quiet_trainer  # noqa: E402

EPOCHS, PER_RANK_BATCH = 2, 16
WATCHDOG_S = int(os.environ.get("LEG_WATCHDOG_S", "100"))  # a leg's hang guard: it prints its stacks and ends


def dataset(n=256):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 16, generator=g)
    return TensorDataset(x, (x[:, :4].argmax(1) + (x[:, 5] > 1).long()) % 4)


def net():
    torch.manual_seed(7)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))


class Net(tm.Module):
    def __init__(self, fail_at: int | None = None):
        super().__init__()
        self.net = net()
        self.fail_at = fail_at

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        if self.fail_at is not None and self.global_rank == 1 and self.global_step == self.fail_at:
            raise RuntimeError(f"planted failure in rank 1 at step {self.global_step}")
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self.net(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(1) == y).float().mean())

    def predict_step(self, batch, batch_idx):
        return self.net(batch[0])

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)


def save_rank_zero(out, module, **extra):
    if int(os.environ.get("RANK", "0")) == 0:
        torch.save({"state_dict": module.state_dict(), **extra}, out)


class NodeBatchNet(Net):
    """ddp2: training_step_end sees the node's whole batch, one loss per device."""

    def training_step_end(self, outputs):
        assert outputs.shape == (2,), f"expected one loss per device, got {tuple(outputs.shape)}"
        self.node_batches = getattr(self, "node_batches", 0) + 1
        return outputs.mean()


class CustomDDP(torch.nn.parallel.DistributedDataParallel):
    """A user's own DDP subclass, returned from configure_ddp."""


class OwnDDPNet(Net):
    def configure_ddp(self, model, device_ids):
        return CustomDDP(model, device_ids=device_ids, find_unused_parameters=True)


def run_trainer(out, strategy="ddp", devices=2, nodes=1):
    trainer = quiet_trainer(strategy=strategy, devices=devices, num_nodes=nodes, max_epochs=EPOCHS)
    model = {"ddp2": NodeBatchNet, "own_ddp": OwnDDPNet}.get(os.environ.get("MODEL", strategy), Net)()
    trainer.fit(model, DataLoader(dataset(), batch_size=PER_RANK_BATCH), DataLoader(dataset(64), batch_size=8))
    if trainer.is_global_zero:
        torch.save(
            {
                "state_dict": model.state_dict(),
                "metrics": trainer.callback_metrics,
                "world_size": trainer.world_size,
                "wrapper": type(trainer.model).__name__,
                "find_unused": getattr(trainer.model, "find_unused_parameters", None),
                "node_batches": getattr(model, "node_batches", 0),
            },
            out,
        )


def handwritten_worker(rank, out, port):
    # The keras-io seed's loop: a DistributedSampler, DDP, Adam; shuffled with seed 0, as the
    # Trainer's sampler shuffles every training loader (Lightning's)
    faulthandler.dump_traceback_later(90, exit=True)  # a hang shows where it hangs, then ends
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2, timeout=timedelta(seconds=60)
    )
    data = dataset()
    sampler = torch.utils.data.DistributedSampler(data, num_replicas=2, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=PER_RANK_BATCH, sampler=sampler)
    model = torch.nn.parallel.DistributedDataParallel(net())
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
    if rank == 0:
        torch.save({"state_dict": {f"net.{k}": v for k, v in model.module.state_dict().items()}}, out)
    dist.barrier()  # leave together: gloo can abort a rank that exits while its peer still talks
    dist.destroy_process_group()


def existing_group_worker(rank, out, port):
    faulthandler.dump_traceback_later(90, exit=True)  # a harness's own group, no launcher variables
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    run_trainer(out)
    assert dist.is_initialized(), "the Trainer must leave a group it did not create"
    dist.barrier()
    dist.destroy_process_group()


class Wide(tm.Module):
    """Equal-size layers, for sharding: every rank gets a similar share of every unit.

    Memory is measured just before the last optimizer step, when gradients and optimizer
    state both exist.
    """

    def on_before_optimizer_step(self, optimizer):
        from trainmesh.utilities.memory import local_state_bytes

        self.memory = local_state_bytes(self.trainer.model, self.trainer.optimizers)

    def __init__(self, width: int = 64, depth: int = 4):
        super().__init__()
        torch.manual_seed(11)
        self.blocks = torch.nn.Sequential(
            *[torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Tanh()) for _ in range(depth)]
        )
        self.head = torch.nn.Linear(width, 4)

    def forward(self, x):
        return self.head(self.blocks(x))

    def predict_step(self, batch, batch_idx):  # the default is forward(batch), as Lightning's: batch is a pair
        return self(batch[0])

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", F.cross_entropy(self(batch[0]), batch[1]), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


class MetaBuilt(Wide):
    """Layers made in configure_model: under fsdp they start on the meta device."""

    def __init__(self):
        tm.Module.__init__(self)

    def configure_model(self):
        self.blocks = torch.nn.Sequential(
            *[torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh()) for _ in range(4)]
        )
        self.head = torch.nn.Linear(64, 4)
        self.built_on = self.head.weight.device.type


def wide_dataset(n=640):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(n, 64, generator=g)
    return TensorDataset(x, x[:, :4].argmax(1))


def run_sharded(out, strategy, devices=2):
    from trainmesh.strategies import FSDPStrategy

    model = Wide()
    if strategy == "hsdp":  # world 4: shard within pairs, replicate across the two pairs
        strategy = FSDPStrategy(shard_size=2)
    elif strategy == "fsdp" and os.environ.get("FSDP_OPTIONS") == "offload+checkpointing":
        block = torch.nn.Sequential  # the Wide model's blocks
        strategy = FSDPStrategy(wrap=[block], cpu_offload=True, activation_checkpointing=[torch.nn.Linear])
    elif strategy == "fsdp-meta":
        strategy, model = "fsdp", MetaBuilt()
    clip = float(os.environ["CLIP"]) if "CLIP" in os.environ else None
    trainer = quiet_trainer(
        strategy=strategy,
        devices=int(devices),
        max_steps=20,
        limit_val_batches=2,
        gradient_clip_val=clip,
        accumulate_grad_batches=int(os.environ.get("ACCUMULATE", "1")),
    )
    trainer.fit(
        model, DataLoader(wide_dataset(), batch_size=PER_RANK_BATCH), DataLoader(wide_dataset(64), batch_size=16)
    )
    memory = model.memory
    state = trainer.runtime.state_dicts(model, [])["model"]
    if trainer.is_global_zero:
        torch.save(
            {
                "state_dict": state,
                "memory": memory,
                "steps": trainer.global_step,
                "metrics": trainer.callback_metrics,
                "built_on": getattr(model, "built_on", None),
            },
            out,
        )


def run_dcp_save(directory, out, strategy="fsdp"):
    """Train on 2 processes, write a checkpoint (fsdp: a distributed one, state_dict_type="sharded"), keep
    the full weights."""
    from trainmesh.strategies import FSDPStrategy

    model = Wide()
    sharded = FSDPStrategy(state_dict_type="sharded") if strategy == "fsdp" else strategy
    trainer = quiet_trainer(strategy=sharded, devices=2, max_steps=20)
    trainer.fit(model, DataLoader(wide_dataset(), batch_size=PER_RANK_BATCH))
    trainer.save_checkpoint(directory)
    state = trainer.runtime.state_dicts(model, [])["model"]
    if trainer.is_global_zero:
        torch.save({"state_dict": state}, out)


def run_dcp_save_async(directory, out):
    """run_dcp_save's fsdp training with AsyncCheckpointIO: distributed checkpoints at steps 10 and 20
    written in the background during fit (each rank's shards staged, then written by DCP on a gloo
    group of their own while the steps go on); keep the full weights."""
    from trainmesh.callbacks import ModelCheckpoint
    from trainmesh.checkpoint import AsyncCheckpointIO
    from trainmesh.strategies import FSDPStrategy

    model = Wide()
    every_10 = ModelCheckpoint(dirpath=directory, every_n_train_steps=10, save_top_k=-1)
    trainer = quiet_trainer(
        strategy=FSDPStrategy(state_dict_type="sharded"),
        devices=2,
        max_steps=20,
        plugins=[AsyncCheckpointIO()],
        callbacks=[every_10],
        enable_checkpointing=True,
    )
    trainer.fit(model, DataLoader(wide_dataset(), batch_size=PER_RANK_BATCH))
    state = trainer.runtime.state_dicts(model, [])["model"]
    if trainer.is_global_zero:
        torch.save({"state_dict": state}, out)


def run_dcp_resume(directory, out, strategy, devices):
    """Resume the distributed checkpoint under another layout and keep the weights it loaded."""
    model = Wide()
    trainer = quiet_trainer(strategy=strategy, devices=int(devices), max_steps=20)
    trainer.fit(model, DataLoader(wide_dataset(), batch_size=PER_RANK_BATCH), ckpt_path=directory)
    state = trainer.runtime.state_dicts(model, [])["model"]
    if trainer.is_global_zero:
        torch.save({"state_dict": state, "steps": trainer.global_step}, out)


def run_sharded_predict(out, strategy):
    model = Wide()
    trainer = quiet_trainer(strategy=strategy, devices=2 if strategy != "single" else 1)
    predictions = trainer.predict(model, DataLoader(wide_dataset(97), batch_size=16))
    # each rank its own predictions, as Lightning's ranks return theirs
    torch.save(torch.cat(predictions), out if trainer.world_size == 1 else f"{out}-rank{trainer.global_rank}")


def run_callbacks(out, directory):
    """ModelCheckpoint and EarlyStopping decide on rank-identical values: no rank waits for another."""
    from trainmesh.callbacks import EarlyStopping, ModelCheckpoint

    checkpoint = ModelCheckpoint(dirpath=directory, monitor="val_loss", save_top_k=2, save_last=True)
    stopper = EarlyStopping(monitor="val_loss", patience=1, min_delta=10.0)  # nothing improves by 10
    trainer = quiet_trainer(
        strategy="ddp", devices=2, max_epochs=20, callbacks=[checkpoint, stopper], enable_checkpointing=True
    )
    trainer.fit(Net(), DataLoader(dataset(), batch_size=PER_RANK_BATCH), DataLoader(dataset(64), batch_size=8))
    torch.save(
        {"epoch": trainer.current_epoch, "best": checkpoint.best_model_path, "kept": sorted(checkpoint.best_k_models)},
        f"{out}.rank{trainer.global_rank}",
    )


def run_val_time(out):
    """A time-based val_check_interval whose clocks disagree: rank 1's runs 5x faster (5 s a batch
    against rank 0's 1 s). Every rank validates where rank 0's clock says (trainer/val_clock.py)."""
    import trainmesh.trainer.val_clock as val_clock

    class Clock:
        now = 0.0

        @classmethod
        def monotonic(cls):
            return cls.now

    class Timed(Net):
        points: list[int] = []

        def on_train_batch_start(self, batch, batch_idx):
            Clock.now += 1.0 + 4.0 * self.global_rank

        def on_validation_end(self):
            if not self.trainer.sanity_checking:
                self.points.append(self.global_step)

    val_clock.time = Clock
    model = Timed()
    trainer = quiet_trainer(strategy="ddp", devices=2, max_epochs=1, val_check_interval="00:00:00:03")
    trainer.fit(model, DataLoader(dataset(), batch_size=PER_RANK_BATCH), DataLoader(dataset(64), batch_size=8))
    torch.save(model.points, f"{out}.rank{trainer.global_rank}")


def run_single(out, optimizer="adam"):
    model = Net() if optimizer == "adam" else SGDNet()
    # At step k the 2 ddp ranks' k-th batches, which the Trainer's sampler shuffles (helpers/lightning_order.py)
    order = GlobalBatches(len(dataset()), world=2, batch_size=PER_RANK_BATCH)
    quiet_trainer(max_epochs=EPOCHS).fit(model, DataLoader(dataset(), batch_size=2 * PER_RANK_BATCH, sampler=order))
    torch.save({"state_dict": model.state_dict()}, out)


def run_fail():
    trainer = quiet_trainer(strategy="ddp", devices=2, max_epochs=50)
    started = time.time()
    try:
        trainer.fit(Net(fail_at=40), DataLoader(dataset(), batch_size=PER_RANK_BATCH))
    finally:
        print(f"rank {os.environ.get('RANK')} left fit after {time.time() - started:.1f}s", file=sys.stderr)


class GatheringNet(Net):
    """A collective inside validation_step: every rank must run as many steps as the others."""

    def validation_step(self, batch, batch_idx):
        self.all_gather(torch.tensor([batch[0].shape[0]]))
        x, y = batch
        # sync_dist: the test compares the run's value, over every rank's share, with one process's
        logits = self.net(x)
        self.log("val_loss", F.cross_entropy(logits, y), sync_dist=True)
        self.log("val_acc", (logits.argmax(1) == y).float().mean(), sync_dist=True)


def run_evaluate(out, samples=1001):
    model = GatheringNet()
    data = DataLoader(dataset(int(samples)), batch_size=16)
    trainer = quiet_trainer(strategy="ddp", devices=2)
    metrics = trainer.validate(model, data, verbose=False)
    predictions = trainer.predict(model, data)  # each rank's own (None: a rank with no sample)
    own = torch.cat(predictions) if predictions is not None else None
    torch.save(own, f"{out}-predictions-rank{trainer.global_rank}")
    if trainer.is_global_zero:
        torch.save({"metrics": metrics}, out)


class MetricsNet(Net):
    """Logs rank-dependent values to show what is reduced across ranks and what stays local."""

    def __init__(self):
        super().__init__()
        import torchmetrics

        self.mean_rank = torchmetrics.MeanMetric()

    def training_step(self, batch, batch_idx):
        rank = float(self.global_rank)
        self.log("rank_step", rank)
        self.log("rank_synced", rank, sync_dist=True)
        self.log("rank_epoch", rank, on_step=False, on_epoch=True)
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch, batch_idx):
        self.mean_rank.update(torch.tensor(float(self.global_rank)))
        self.log("tm_mean_rank", self.mean_rank)
        self.gathered = self.all_gather(torch.tensor([self.global_rank]))


calls_on_rank_zero = []


@tm.rank_zero_only
def note_call():
    calls_on_rank_zero.append(1)


def run_metrics(out):
    model = MetricsNet()
    trainer = quiet_trainer(strategy="ddp", devices=2, max_epochs=1)
    trainer.fit(model, DataLoader(dataset(), batch_size=PER_RANK_BATCH), DataLoader(dataset(64), batch_size=8))
    note_call()
    torch.save(
        {"metrics": trainer.callback_metrics, "gathered": model.gathered, "calls": len(calls_on_rank_zero)},
        f"{out}.rank{trainer.global_rank}",
    )


def run_accumulate(out, accumulate, batch):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    counter = {"allreduce": 0}

    def counting_hook(state, bucket):
        counter["allreduce"] += 1
        return default_hooks.allreduce_hook(None, bucket)

    class CountAllReduce(tm.Callback):
        def on_fit_start(self, trainer, module):
            trainer.model.register_comm_hook(None, counting_hook)

    model = Net()
    trainer = quiet_trainer(
        strategy="ddp", devices=2, max_epochs=1, accumulate_grad_batches=accumulate, callbacks=[CountAllReduce()]
    )
    trainer.fit(model, DataLoader(dataset(), batch_size=batch))
    if trainer.is_global_zero:
        torch.save(
            {"state_dict": model.state_dict(), "allreduce_calls": counter["allreduce"], "steps": trainer.global_step},
            out,
        )


class UnusedHead(Net):
    def __init__(self):
        super().__init__()
        self.unused = torch.nn.Linear(4, 4)  # never part of the loss


def run_unused(find_unused: bool):
    from trainmesh.strategies import DDPStrategy

    strategy = DDPStrategy(find_unused_parameters=find_unused)
    trainer = quiet_trainer(strategy=strategy, devices=2, max_epochs=1)
    trainer.fit(UnusedHead(), DataLoader(dataset(), batch_size=PER_RANK_BATCH))


def run_runtime(out):
    # The keras-io seed's loop, made multi-process by the Runtime alone.
    runtime = tm.Runtime(accelerator="cpu", strategy="ddp", devices=2)

    def train():
        model = net()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        model, optimizer = runtime.setup(model, optimizer)
        # shuffle=True: the Runtime shuffles a RandomSampler's loader (as Lightning's Fabric), as the loop above
        loader = runtime.setup_dataloaders(DataLoader(dataset(), batch_size=PER_RANK_BATCH, shuffle=True))
        for epoch in range(EPOCHS):
            loader.set_epoch(epoch)
            for x, y in loader:
                optimizer.zero_grad()
                runtime.backward(F.cross_entropy(model(x), y))
                optimizer.step()
        runtime.save(out, {"model": model})

    runtime.launch(train)


class GatheredLossNet(Net):
    """One loss over every process's outputs, gathered with gradients (a contrastive loss's
    pattern): under ddp each process's slice gets the gradient of the whole batch's loss."""

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self.all_gather(self.net(x), sync_grads=True).flatten(0, 1)
        return F.cross_entropy(logits, self.all_gather(y).flatten(0, 1))

    def configure_optimizers(self):
        # SGD, not Adam: Adam would hide a gradient off by a constant factor.
        return torch.optim.SGD(self.parameters(), lr=0.1)


class SGDNet(Net):
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def run_gather_grads(out):
    """gather_grads OUT: ddp at 16 a process, the loss over the gathered 32 (as single's one batch of
    32); rank 0 saves weights."""
    model = GatheredLossNet()
    trainer = quiet_trainer(strategy="ddp", devices=2, max_epochs=EPOCHS)
    trainer.fit(model, DataLoader(dataset(), batch_size=PER_RANK_BATCH))
    save_rank_zero(out, model)


class StrategyFaceNet(Net):
    """Calls Lightning's collectives on trainer.strategy from a hook, as Lightning programs do."""

    def on_train_start(self):
        strategy, rank = self.trainer.strategy, self.global_rank
        value = torch.tensor(float(rank))
        loss = torch.tensor(float(rank))  # reduced through a view, as `reduce(loss.detach())` does
        self.face = {
            "world_size": strategy.world_size,
            "global_rank": strategy.global_rank,
            "is_global_zero": strategy.is_global_zero,
            "sum": float(strategy.reduce(value.clone(), reduce_op="sum")),
            "mean": float(strategy.reduce(value.clone())),
            "max": float(strategy.reduce(value.clone(), reduce_op=dist.ReduceOp.MAX)),
            "view_reduced": (float(strategy.reduce(loss.detach(), reduce_op="sum")), float(loss)),
            "same_object": strategy.reduce(value, reduce_op="max") is value,
            "int_mean": strategy.reduce(torch.tensor(rank)),
            "gather": strategy.all_gather(torch.tensor([float(rank)])).tolist(),
            "broadcast": strategy.broadcast(f"from {rank}"),
            "all_true": strategy.reduce_boolean_decision(rank == 0),
            "any_true": strategy.reduce_boolean_decision(rank == 0, all=False),
        }
        strategy.barrier("face")


def run_strategy_face(out):
    """strategy_face OUT: Lightning's trainer.strategy collectives at 2 processes; each rank saves its answers."""
    model = StrategyFaceNet()
    trainer = quiet_trainer(strategy="ddp", devices=2, max_steps=1)
    trainer.fit(model, DataLoader(dataset(64), batch_size=PER_RANK_BATCH))
    torch.save(model.face, f"{out}.rank{trainer.global_rank}")


def run_trainer_leg(out, strategy="ddp", devices="2", nodes="1"):
    """trainer OUT [STRATEGY DEVICES NODES]: a Trainer run; rank 0 saves weights."""
    run_trainer(out, strategy, int(devices), int(nodes))


def run_handwritten(out):
    """handwritten OUT: the keras-io seed's hand-written DDP loop, in two processes (start_workers)."""
    from trainmesh.launchers.environments import find_free_port

    start_workers(handwritten_worker, (out, find_free_port()), 2, guard_s=WATCHDOG_S)


def run_existing(out):
    """existing OUT: a harness's own process group, made before the Trainer (start_workers)."""
    from trainmesh.launchers.environments import find_free_port

    start_workers(existing_group_worker, (out, find_free_port()), 2, guard_s=WATCHDOG_S)


def run_accumulate_leg(out, accumulate, batch):
    """accumulate OUT ACCUMULATE BATCH: counted all-reduces under gradient accumulation."""
    run_accumulate(out, int(accumulate), int(batch))


def run_unused_leg(find):
    """unused find|default: DDP with parameters outside the loss."""
    run_unused(find == "find")


# The programs of this file: a leg's argv is NAME ARGS... (tests/helpers/batches.py's dispatch).
PROGRAMS = {
    "trainer": run_trainer_leg,
    "handwritten": run_handwritten,
    "existing": run_existing,
    "single": run_single,
    "fail": run_fail,
    "evaluate": run_evaluate,
    "metrics": run_metrics,
    "accumulate": run_accumulate_leg,
    "sharded": run_sharded,
    "dcp_save": run_dcp_save,
    "dcp_save_async": run_dcp_save_async,
    "dcp_resume": run_dcp_resume,
    "predict": run_sharded_predict,
    "callbacks": run_callbacks,
    "unused": run_unused_leg,
    "runtime": run_runtime,
    "gather_grads": run_gather_grads,
    "strategy_face": run_strategy_face,
    "val_time": run_val_time,
}


def run_mode(argv: list[str]) -> None:
    """One leg: ``argv`` is the command line after the program (NAME ARGS..., NAME a key of PROGRAMS)."""
    from helpers.batches import dispatch

    dispatch(PROGRAMS, argv)


if __name__ == "__main__":
    # Every leg (and worker re-running this script) prints its stacks and ends if it hangs.
    if sys.argv[1] == "--batch":  # several legs in one launch (helpers/batches.py), a watchdog each
        import json

        from helpers.batches import run_batch

        if any(argv[0] == "metrics" for argv, *_ in json.loads(open(sys.argv[2]).read())["legs"]):
            # MetricsNet's torchmetrics, imported once here, before the workers fork (helpers/batches.py's
            # fork_workers), not once in each of them (2.4 CPU-s a process); it starts no thread.
            import torchmetrics  # noqa: F401

        run_batch(sys.argv[2], run_mode, limit=WATCHDOG_S)
    else:
        faulthandler.dump_traceback_later(WATCHDOG_S, exit=True)
        run_mode(sys.argv[1:])
