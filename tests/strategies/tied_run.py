"""Legs of test_tied_weights: the tied-embedding Llama (tests/helpers/llama.py) trained by the
Trainer under a named layout, or a layout that must be refused.

python tied_run.py train LAYOUT OUT [KEY=VALUE ...]
    KEY: clip=0.05, accumulate=2, steps=N (max_steps), save=PATH (a checkpoint after fit: a distributed
    checkpoint directory under model parallelism), resume=PATH (fit(ckpt_path=PATH)).
    Rank 0 writes OUT: {"state_dict": the whole model's weights (both tied names), "copies": per rank,
    {name: full tensor} of each tied name it holds, "same_object": per rank, whether the names it holds
    are one Parameter, "losses": the step losses}.
python tied_run.py refuse LAYOUT OUT -> rank 0 writes {"message": what setting up the run raised}
python tied_run.py --batch SPEC.json -> several legs in one launch (tests/helpers/batches.py)
"""

import faulthandler
import os
import sys

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from helpers.llama import Llama, LlamaConfig, token_loader  # noqa: E402
from helpers.models import quiet_trainer  # noqa: E402
from trainmesh.callbacks import Callback  # noqa: E402
from trainmesh.strategies import ModelParallelStrategy  # noqa: E402

CONFIG = LlamaConfig(tie_embeddings=True)
TIED = ("tok_embeddings.weight", "output.weight")
GLOBAL_BATCH, SAMPLES = 8, 40  # 5 steps an epoch
# AdamW moves a weight whose gradient is near 0 by about lr whatever its size, so float32
# reordering (tp, pp) shows as lr-sized noise there: lr 1e-3 keeps it well under 1e-5.
LR = 1e-3
# AdamW's first step moves a weight by lr * g / (|g| + eps): where a first gradient is below
# float32's rounding unit of its layer's largest one (~4e-9 here), eps=1e-8 turns that rounding
# into up to 1e-4 of weight (measured: wv[8,22] with a first gradient of -2.8e-9 under the shuffled
# order). eps=1e-5 bounds the effect by lr * rounding / eps ~ 4e-7, far under ATOL, while an untied
# copy still ends ~1e-3 away.
ADAM_EPS = 1e-5


def _mp(**sizes):
    return lambda: ModelParallelStrategy(dp_shard=1, microbatches=2, **sizes)


LAYOUTS = {
    "single": (1, lambda: "single", 1),
    "tp": (2, _mp(tp=2), 1),
    "pp": (2, _mp(pp=2), 1),
    "pp_v": (2, _mp(pp=2, schedule="ZBVZeroBubble"), 1),  # both uses on rank 0: one object there
    "pp_tp": (4, _mp(pp=2, tp=2), 1),
    # Four stages: the middle ranks hold no copy and add zeros to the sum over pp.
    "pp4": (4, lambda: ModelParallelStrategy(pp=4, dp_shard=1, microbatches=4), 1),
    "pp_fsdp": (4, lambda: ModelParallelStrategy(pp=2, dp_shard=2, microbatches=2), 2),
    "pp_replicate": (4, lambda: ModelParallelStrategy(pp=2, dp_replicate=2, dp_shard=1, microbatches=2), 2),
    "tp_user": (2, _mp(tp=2), 1),
    "tp_user_meta": (2, _mp(tp=2), 1),
}


class UserParallelized(Llama):
    """The README's route for one's own tensor-parallel code: configure_model(mesh) applies
    parallelize_module itself (tensor_parallel_plan() None), here with the tie made in __init__."""

    def tensor_parallel_plan(self):
        return None

    def own_plan(self):
        return Llama.tensor_parallel_plan(self)

    def configure_model(self, mesh):
        from torch.distributed.tensor.parallel import parallelize_module

        if "layers" not in self._modules:
            self.build()
        parallelize_module(self, mesh.submesh("tp"), self.own_plan())


class UserBuilt(UserParallelized):
    """The tie made inside configure_model (on the meta device) and split there by the model's own
    parallelize_module: only the parameters' registrations show that the two names were one."""

    def __init__(self, config, lr, adam_eps):
        super().__init__(config, lr, build_in_configure_model=True, adam_eps=adam_eps)


class UserMismatched(UserParallelized):
    """The model's own plan splits the output head along its input, the embedding along the vocabulary."""

    def own_plan(self):
        from torch.distributed.tensor.parallel import RowwiseParallel

        return {**Llama.tensor_parallel_plan(self), "output": RowwiseParallel()}


class UserOutputWhole(UserParallelized):
    """The model's own plan splits the embedding and leaves the output head whole."""

    def own_plan(self):
        plan = Llama.tensor_parallel_plan(self)
        del plan["output"]
        return plan


MODELS = {"tp_user": UserParallelized, "tp_user_meta": UserBuilt}


class Mismatched(Llama):
    """The output head split along its input (RowwiseParallel: Shard(1)), the embedding along
    the vocabulary (Shard(0)): the tied matrix would be cut two ways."""

    def tensor_parallel_plan(self):
        from torch.distributed.tensor.parallel import RowwiseParallel

        return {**super().tensor_parallel_plan(), "output": RowwiseParallel()}


class OutputWhole(Llama):
    """The embedding split, the output head left whole."""

    def tensor_parallel_plan(self):
        plan = super().tensor_parallel_plan()
        del plan["output"]
        return plan


REFUSALS = {
    "tp_mismatch": (2, Mismatched, _mp(tp=2)),
    "tp_whole": (2, OutputWhole, _mp(tp=2)),
    "pp_tp_mismatch": (4, Mismatched, _mp(pp=2, tp=2)),
    "pp_v_fsdp": (4, Llama, lambda: ModelParallelStrategy(pp=2, dp_shard=2, microbatches=2, schedule="ZBVZeroBubble")),
    "tp_user_mismatch": (2, UserMismatched, _mp(tp=2)),
    "tp_user_whole": (2, UserOutputWhole, _mp(tp=2)),
}


class Losses(Callback):
    def __init__(self):
        self.losses = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.losses.append(float(trainer.callback_metrics["train_loss"]))


def build(cls=Llama) -> Llama:
    torch.manual_seed(0)
    return cls(CONFIG, lr=LR, adam_eps=ADAM_EPS)  # __init__ ends with init_weights(): small weights, N(0, 0.02)


def _full(tensor: torch.Tensor) -> torch.Tensor:
    return (tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor).detach().cpu().clone()


def held_copies(model: torch.nn.Module) -> tuple[dict, bool]:
    """This rank's tied names, their whole values, and whether they are one Parameter object."""
    named = dict(model.named_parameters(remove_duplicate=False))
    held = {name: named[name] for name in TIED if name in named}
    return {name: _full(p) for name, p in held.items()}, len({id(p) for p in held.values()}) <= 1


def train(layout: str, out: str, *options: str) -> None:
    opts = dict(option.split("=", 1) for option in options)
    world, strategy, dp = LAYOUTS[layout]
    model, losses = build(MODELS.get(layout, Llama)), Losses()
    trainer = quiet_trainer(
        devices=world,
        strategy=strategy(),
        max_epochs=int(opts.get("epochs", 1)),
        max_steps=int(opts.get("steps", -1)),
        gradient_clip_val=float(opts["clip"]) if "clip" in opts else None,
        accumulate_grad_batches=int(opts.get("accumulate", 1)),
        num_sanity_val_steps=0,
        callbacks=[losses],
        enable_checkpointing="save" in opts,
        default_root_dir=os.path.dirname(out),
        exact_resume=True,  # a resume continues the run (the epoch's last steps), as one run
    )
    loader = token_loader(CONFIG, batch_size=GLOBAL_BATCH // dp, samples=SAMPLES, uneven_padding=False)
    if layout == "single":
        # The layouts' step k: the samples the Trainer's shuffling sampler deals their ranks (seed 0)
        from helpers.lightning_order import GlobalBatches

        order = GlobalBatches(len(loader.dataset), world=1, batch_size=GLOBAL_BATCH)
        loader = DataLoader(loader.dataset, batch_size=GLOBAL_BATCH, sampler=order)
    trainer.fit(model, loader, ckpt_path=opts.get("resume"))
    if "save" in opts:
        trainer.save_checkpoint(opts["save"])
    full = trainer.runtime.state_dicts(trainer.model, [], sharded=False)["model"]
    mine = held_copies(trainer.model)
    every = [mine]
    if dist.is_initialized() and world > 1:
        every = [None] * dist.get_world_size()
        dist.all_gather_object(every, mine)
    if trainer.is_global_zero:
        torch.save(
            {
                "state_dict": {k: v.detach().cpu() for k, v in full.items()},
                "copies": [copies for copies, _ in every],
                "same_object": [same for _, same in every],
                "losses": losses.losses,
                "steps": trainer.global_step,
            },
            out,
        )


def refuse(name: str, out: str) -> None:
    world, cls, strategy = REFUSALS[name]
    trainer = quiet_trainer(devices=world, strategy=strategy(), max_steps=1, num_sanity_val_steps=0)
    try:
        trainer.fit(build(cls), token_loader(CONFIG, batch_size=GLOBAL_BATCH, samples=SAMPLES, uneven_padding=False))
    except ValueError as err:
        if trainer.is_global_zero:
            torch.save({"message": str(err)}, out)
        return
    raise AssertionError(f"{name} trained: it should have been refused")


# The programs of this file: a leg's argv is NAME ARGS... (tests/helpers/batches.py's dispatch).
PROGRAMS = {"train": train, "refuse": refuse}


def main(argv: list[str]) -> None:
    from helpers.batches import dispatch

    dispatch(PROGRAMS, argv)


if __name__ == "__main__":
    if sys.argv[1] == "--batch":
        from helpers.batches import run_batch

        run_batch(sys.argv[2], main, limit=240)
    else:
        faulthandler.dump_traceback_later(240, exit=True)
        main(sys.argv[1:])
