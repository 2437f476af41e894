"""A user's own loop on ``Runtime(strategy="dp")`` trains exactly as the Trainer does under dp.

dp runs in one process; on CPU each batch's chunks run one after another, each as if on its own
device. The model has BatchNorm so that the split matters: every chunk normalizes with its own
batch statistics (as every GPU does under DataParallel), and only chunk 0's running statistics
are kept. A user's loop gets the split from calling the placed model; the Trainer gets it from
the strategy's step. Both must end with the same weights and buffers.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from helpers.models import quiet_trainer

DEVICES = 2
BATCH_SIZE = 16
EPOCHS = 2
SAMPLES = 64
STEPS = EPOCHS * SAMPLES // BATCH_SIZE
LR = 0.1


def make_net() -> nn.Sequential:
    # BatchNorm makes the split visible; no dropout, so no RNG is drawn during training.
    return nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))


def make_loader() -> DataLoader:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, 8, generator=generator)
    y = torch.randint(0, 3, (SAMPLES,), generator=generator)
    return DataLoader(TensorDataset(x, y), batch_size=BATCH_SIZE, shuffle=False)


class Classifier(tm.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = make_net()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=LR)


def train_with_trainer() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    module = Classifier()
    trainer = quiet_trainer(devices=DEVICES, strategy="dp", max_epochs=EPOCHS, num_sanity_val_steps=0)
    trainer.fit(module, make_loader())
    assert trainer.global_step == STEPS
    return clone_state(module.net)


def initial_state() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return clone_state(Classifier().net)


def train_with_own_loop(runtime: tm.Runtime, chunks: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    net = make_net()
    model, optimizer = runtime.setup(net, torch.optim.SGD(net.parameters(), lr=LR))
    loader = runtime.setup_dataloaders(make_loader())
    for _ in range(EPOCHS):
        for x, y in loader:
            out = model(x)  # under dp: the batch split over the devices, the outputs gathered
            # The Trainer's loss under dp without training_step_end: the mean over the chunks of
            # each chunk's mean loss (equal to cross_entropy over `out` only up to rounding).
            losses = [F.cross_entropy(o, t) for o, t in zip(out.chunk(chunks), y.chunk(chunks))]
            runtime.backward(torch.stack(losses).mean())
            optimizer.step()
            optimizer.zero_grad()
    return clone_state(net)


def clone_state(module: nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in module.state_dict().items()}


def test_dp_user_loop_gives_the_trainers_weights() -> None:
    # Both runs must start from the same weights, or the comparison says nothing.
    start = initial_state()
    torch.manual_seed(0)
    for name, tensor in clone_state(make_net()).items():
        assert torch.equal(tensor, start[name]), name

    trainer_state = train_with_trainer()
    dp_state = train_with_own_loop(tm.Runtime(accelerator="cpu", devices=DEVICES, strategy="dp"), chunks=DEVICES)

    assert trainer_state.keys() == dp_state.keys()
    for name, tensor in trainer_state.items():
        # Bit-identical: both run the same chunks in the same order with the same loss
        # arithmetic (a per-chunk mean, then the mean of the chunks' losses).
        assert torch.equal(dp_state[name], tensor), f"{name}: max diff {(dp_state[name] - tensor).abs().max()}"
    assert not torch.equal(trainer_state["0.weight"], start["0.weight"])  # it did train

    # BatchNorm's buffers: chunk 0's running statistics kept, one update per step (not per chunk).
    assert int(dp_state["1.num_batches_tracked"]) == int(trainer_state["1.num_batches_tracked"]) == STEPS
    assert torch.equal(dp_state["1.running_mean"], trainer_state["1.running_mean"])
    assert torch.equal(dp_state["1.running_var"], trainer_state["1.running_var"])

    # The split really happens: the same loop on one device normalizes whole batches, and its
    # weights and statistics part from dp's well beyond rounding.
    single_state = train_with_own_loop(tm.Runtime(accelerator="cpu", devices=1, strategy="single"), chunks=DEVICES)
    assert int(single_state["1.num_batches_tracked"]) == STEPS
    for name in ("0.weight", "3.weight", "1.running_mean"):
        difference = (single_state[name] - dp_state[name]).abs().max()
        assert difference > 1e-4, f"{name}: single and dp differ by only {difference}"
