"""A Lightning 1.x truncated-backpropagation program for test_tbptt: a GRU over generated sequences
with ``truncated_bptt_steps = 2``, ``training_step(batch, batch_idx, hiddens)`` returning
``{"loss": ..., "hiddens": ...}``, a step scheduler, clipping, and the hooks around each split recorded.
The same program ran under pytorch-lightning 1.9.5 (the module's base, Callback and Trainer renamed:
record_tbptt_lightning_1_9.py) gave the weights and call lists the test holds. ``Turns``: two optimizers
taking turns in each split.

python tbptt_run.py --batch SPEC.json   -> legs ``trainer OUT VARIANT STRATEGY DEVICES`` (helpers/batches.py)
"""

import faulthandler
import os
import sys

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import trainmesh as tm  # noqa: E402

SAMPLES, BATCH, STEPS, EPOCHS, CLIP = 16, 4, 5, 2, 0.5


class Rnn(tm.Module):
    """variant: "plain" (1.x's default split along dim 1 into pieces of 2: 2, 2, 1), "acc" (as plain,
    under accumulate_grad_batches=2), "split" (a tbptt_split_batch override: pieces of 1, then 2, 2)."""

    def __init__(self, variant: str):
        super().__init__()
        torch.manual_seed(0)
        self.gru, self.head = torch.nn.GRU(3, 4, batch_first=True), torch.nn.Linear(4, 1)
        self.truncated_bptt_steps = 2
        self.variant, self.calls, self.shapes = variant, [], {}

    def training_step(self, batch, batch_idx, hiddens):
        x, y = batch
        self.calls.append(("training_step", batch_idx, x.shape[1], hiddens is None))
        if hiddens is not None:
            assert not hiddens.requires_grad  # detached between the splits
        out, hiddens = self.gru(x, hiddens)
        loss = F.mse_loss(self.head(out), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        return {"loss": loss, "hiddens": hiddens, "extra": loss.detach() * 2}

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1, 0.9)
        return [optimizer], [{"scheduler": scheduler, "interval": "step"}]

    def on_train_batch_start(self, batch, batch_idx):
        self.calls.append(("on_train_batch_start", batch_idx, self.trainer.global_step))

    def on_before_zero_grad(self, optimizer):
        self.calls.append(("on_before_zero_grad",))

    def on_after_backward(self):
        self.calls.append(("on_after_backward",))

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.calls.append(("on_train_batch_end", batch_idx, self.trainer.global_step))
        self.shapes.setdefault("batch_end", _shape(outputs))

    def training_epoch_end(self, outputs):
        self.shapes.setdefault("epoch_end", _shape(outputs))


class Split(Rnn):
    def tbptt_split_batch(self, batch, split_size):
        x, y = batch
        self.calls.append(("tbptt_split_batch", x.shape[1], split_size))
        edges = [0, 1, *range(1 + split_size, x.shape[1], split_size), x.shape[1]]
        return [[x[:, a:b], y[:, a:b]] for a, b in zip(edges, edges[1:])]


class Turns(Rnn):
    """Two optimizers taking turns in each split (1.x's ``training_step(batch, batch_idx, optimizer_idx,
    hiddens)``): the GRU's (SGD with momentum and a step scheduler) and the head's (Adam). variant "turns",
    or "turns_acc" under accumulate_grad_batches=2. Each turn records the hiddens it got (None, or which
    earlier turn's), since 1.9 carries one hidden state from each training_step to the next."""

    def training_step(self, batch, batch_idx, optimizer_idx, hiddens):
        x, y = batch
        seen = None if hiddens is None else round(float(hiddens.sum()), 4)
        self.calls.append(("training_step", batch_idx, optimizer_idx, x.shape[1], seen))
        if hiddens is not None:
            assert not hiddens.requires_grad  # detached between the turns
        out, hiddens = self.gru(x, hiddens)
        prediction = self.head(out)
        loss = F.mse_loss(prediction, y) if optimizer_idx == 0 else F.l1_loss(prediction, y)
        self.log(f"loss_{optimizer_idx}", loss, on_step=True, on_epoch=True)
        return {"loss": loss, "hiddens": hiddens * (1 + optimizer_idx), "extra": loss.detach() * 2}

    def configure_optimizers(self):
        rnn = torch.optim.SGD(self.gru.parameters(), lr=0.1, momentum=0.9)
        head = torch.optim.Adam(self.head.parameters(), lr=0.01)
        scheduler = torch.optim.lr_scheduler.StepLR(rnn, 1, 0.9)
        return [rnn, head], [{"scheduler": scheduler, "interval": "step"}]

    def on_before_zero_grad(self, optimizer):
        self.calls.append(("on_before_zero_grad", type(optimizer).__name__))

    def on_before_optimizer_step(self, optimizer, optimizer_idx):
        self.calls.append(("on_before_optimizer_step", optimizer_idx, self.trainer.global_step))


def _shape(outputs):
    """Nested lists kept, each dict by its sorted keys."""
    if isinstance(outputs, list):
        return [_shape(item) for item in outputs]
    return sorted(outputs) if isinstance(outputs, dict) else type(outputs).__name__


class Recorder(tm.Callback):
    def __init__(self, module):
        self.module = module

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.module.calls.append(("cb.on_train_batch_start", batch_idx))


def data(devices: int = 1) -> DataLoader:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(SAMPLES, STEPS, 3, generator=generator)
    y = x.cumsum(1)[..., :1] * 0.3
    return DataLoader(TensorDataset(x, y), batch_size=BATCH // devices)


def fit(variant: str, strategy: str = "auto", devices: int = 1) -> tuple[Rnn, tm.Trainer]:
    module = Split(variant) if variant == "split" else Turns(variant) if variant.startswith("turns") else Rnn(variant)
    trainer = tm.Trainer(
        max_epochs=EPOCHS,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        accelerator="cpu",
        strategy=strategy,
        devices=devices,
        accumulate_grad_batches=2 if variant.endswith("acc") else 1,
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
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
        torch.save({"state_dict": module.state_dict(), "global_step": trainer.global_step, "metrics": metrics}, out)


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
