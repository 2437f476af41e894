"""Legs of test_compile: a small transformer-like model trained by the Trainer, eager or compiled.

python compile_run.py train STRATEGY WORLD COMPILE OUT [STEPS [SAVE_AT]]
    COMPILE: "no", "aot_eager" or "inductor"; rank 0 saves {"state_dict", "checkpoint_keys"} to
    OUT, and with SAVE_AT a checkpoint of the run after SAVE_AT steps to OUT.ckpt.
    [BATCH_SIZE]: 8 by default (per process).
python compile_run.py resume STRATEGY WORLD COMPILE CKPT OUT [BATCH_SIZE] -> resumes CKPT up to 20 steps.
python compile_run.py user STRATEGY WORLD BACKEND OUT [SAVE_AT] -> trainer.fit(torch.compile(Net(), backend=BACKEND))
    (the user's own compile, no compile= on the Trainer): as train, plus (one process) what
    trainer.predict(compiled) and the user's compiled(x) returned after fit.
python compile_run.py refuse OUT -> {name: what fit(torch.compile(Net())) raised where it is refused,
    "runtime_setup": whether Runtime.setup(torch.compile(layer)) placed the layer itself, compiled}
python compile_run.py --batch SPEC.json -> several legs in one launch (tests/helpers/batches.py)
"""

import faulthandler
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import trainmesh as tm  # noqa: E402
from helpers.models import quiet_trainer  # noqa: E402

D, STEPS = 16, 20


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm, self.up, self.down = nn.LayerNorm(D), nn.Linear(D, 2 * D), nn.Linear(2 * D, D)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


class Net(tm.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Linear(8, D)
        self.blocks = nn.ModuleList([Block() for _ in range(2)])
        self.head = nn.Linear(D, 4)

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)


def data(batch_size: int = 8, world: str = "2") -> DataLoader:
    """320 samples; one process at batch 16 (the reference of 2 processes of batch 8) reads at each
    step the samples the Trainer's shuffling sampler deals the 2 ddp ranks (seed 0)."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(320, 8, generator=g)
    dataset = TensorDataset(x, x[:, :4].argmax(1))
    if world == "1" and batch_size == 16:
        from helpers.lightning_order import GlobalBatches

        return DataLoader(dataset, batch_size=16, sampler=GlobalBatches(len(dataset), world=2, batch_size=8))
    return DataLoader(dataset, batch_size=batch_size)


def trainer_for(strategy: str, world: str, compile: str, steps: int, root: str) -> tm.Trainer:
    options = {} if compile == "no" else {"backend": compile}
    return quiet_trainer(
        strategy=strategy,
        devices=int(world),
        max_steps=steps,
        default_root_dir=root,
        compile=options if options else False,
        exact_resume=True,  # resumed == uninterrupted (a named ckpt_path resumes as Lightning otherwise)
    )


class SaveAt(tm.Callback):
    def __init__(self, step: int, path: str) -> None:
        self.step, self.path = step, path

    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == self.step:
            trainer.save_checkpoint(self.path)


def finish(trainer: tm.Trainer, model: Net, out: str) -> None:
    state = trainer.runtime.state_dicts(model, [])["model"]
    if trainer.is_global_zero:
        compiled = [name for name, m in model.named_modules() if getattr(m, "_compiled_call_impl", None) is not None]
        from torch._dynamo.utils import counters  # graphs dynamo built in this process (all legs so far)

        torch.save(
            {
                "state_dict": {k: v.clone() for k, v in state.items()},
                "compiled": compiled,
                "graphs": int(counters["stats"]["unique_graphs"]),
            },
            out,
        )


def train(
    strategy: str, world: str, compile: str, out: str, steps: str = str(STEPS), save_at: str = "", batch_size: str = "8"
) -> None:
    model = Net()
    trainer = trainer_for(strategy, world, compile, int(steps), os.path.dirname(out))
    if save_at:
        trainer.callbacks.append(SaveAt(int(save_at), out + ".ckpt"))
    trainer.fit(model, data(int(batch_size), world))
    finish(trainer, model, out)


def user(strategy: str, world: str, backend: str, out: str, save_at: str = "") -> None:
    model = Net()
    compiled = torch.compile(model, backend=backend)
    trainer = trainer_for(strategy, world, "no", STEPS, os.path.dirname(out))
    if save_at:
        trainer.callbacks.append(SaveAt(int(save_at), out + ".ckpt"))
    trainer.fit(compiled, data(16 // int(world), world))
    finish(trainer, model, out)
    if not trainer.is_global_zero:
        return
    if world == "1":
        result = torch.load(out)
        x = data().dataset.tensors[0][:32]
        result["predicted"] = torch.cat(trainer.predict(compiled, DataLoader(x, batch_size=16)))
        with torch.no_grad():
            result["user_output"] = compiled(x)  # the user's own reference, called after fit
        result["predict_input"] = x
        torch.save(result, out)


def refuse(out: str) -> None:
    """What fit(torch.compile(Net())) says where it is refused (dynamo is imported by now: cheap here)."""
    messages = {}
    cases = {
        "zero1": lambda: quiet_trainer(strategy="zero1", devices=2),
        "dp": lambda: quiet_trainer(strategy="dp", devices=2),
        "twice": lambda: quiet_trainer(compile=True),
    }
    for name, make in cases.items():
        try:
            make().fit(torch.compile(Net(), backend="aot_eager"), data())
        except ValueError as err:
            messages[name] = str(err)
    # A loop of one's own: Runtime.setup(torch.compile(m)) places m itself, compiled in place.
    layer = nn.Linear(2, 2)
    before = set(vars(layer))
    placed = tm.Runtime(accelerator="cpu", devices=1).setup(torch.compile(layer, backend="aot_eager"))
    messages["runtime_setup"] = placed is layer and getattr(layer, "_compiled_call_impl", None) is not None
    # What the user's module gained: only torch's own Module.compile state, no marker of the strategy's
    messages["written_onto_layer"] = sorted(set(vars(layer)) - before)
    torch.save(messages, out)


def resume(strategy: str, world: str, compile: str, ckpt: str, out: str, batch_size: str = "8") -> None:
    model = Net()
    trainer = trainer_for(strategy, world, compile, STEPS, os.path.dirname(out))
    trainer.fit(model, data(int(batch_size), world), ckpt_path=ckpt)
    finish(trainer, model, out)


# The programs of this file: a leg's argv is NAME ARGS... (tests/helpers/batches.py's dispatch).
PROGRAMS = {"train": train, "resume": resume, "refuse": refuse, "user": user}


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
