"""Manual optimization's tools on one process, against the same steps written in plain torch:
accumulation over two batches (``no_backward_sync`` around the first backward), clipping by
norm through ``self.clip_gradients``, a scheduler stepped with ``self.lr_schedulers()``."""

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from trainmesh.strategies import SingleDeviceStrategy, StrategyCapabilities

CLIP, LR = 0.05, 0.5


def data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 6, generator=g)
    return TensorDataset(x, x.sum(1, keepdim=True))


def network():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1))


class Accumulating(tm.Module):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        self.net = network()

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        opt, scheduler = self.optimizers(), self.lr_schedulers()
        x, y = batch
        loss = nn.functional.mse_loss(self(x), y) / 2
        last_of_window = batch_idx % 2 == 1
        with self.no_backward_sync(enabled=not last_of_window):
            self.manual_backward(loss)
        if last_of_window:
            self.clip_gradients(opt, gradient_clip_val=CLIP, gradient_clip_algorithm="norm")
            opt.step()
            opt.zero_grad()
            scheduler.step()
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=LR)
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)]


def handwritten(clip=CLIP):
    net = network()
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    for batch_idx, (x, y) in enumerate(DataLoader(data(), batch_size=8)):
        (nn.functional.mse_loss(net(x), y) / 2).backward()
        if batch_idx % 2 == 1:
            if clip is not None:
                nn.utils.clip_grad_norm_(net.parameters(), clip)
            opt.step()
            opt.zero_grad()
            scheduler.step()
    return net.state_dict(), scheduler.get_last_lr()


def test_accumulation_clipping_and_schedulers_match_plain_torch(tmp_path):
    module = Accumulating()
    trainer = tm.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(module, DataLoader(data(), batch_size=8))
    expected, expected_lr = handwritten()
    assert trainer.global_step == 4  # one per opt.step(), as in Lightning
    assert module.lr_schedulers().get_last_lr() == pytest.approx(expected_lr)  # stepped 4 times
    for name, tensor in expected.items():
        assert torch.equal(module.net.state_dict()[name], tensor), name
    # Clipping changes the result here, so the equality above shows it ran.
    unclipped, _ = handwritten(clip=None)
    assert any(not torch.equal(unclipped[name], tensor) for name, tensor in expected.items())


class UncheckedStrategy(SingleDeviceStrategy):
    """A user's strategy that does not state manual optimization among its capabilities."""

    capabilities = StrategyCapabilities()


def test_a_strategy_manual_optimization_was_not_checked_under_is_refused_before_training(tmp_path):
    module = Accumulating()
    before = {name: tensor.clone() for name, tensor in module.state_dict().items()}
    trainer = tm.Trainer(
        accelerator="cpu",
        devices=1,
        strategy=UncheckedStrategy(),
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    with pytest.raises(ValueError, match=r"strategy '\w+' with Accumulating.automatic_optimization = False: manual"):
        trainer.fit(module, DataLoader(data(), batch_size=8))
    assert all(torch.equal(module.state_dict()[name], tensor) for name, tensor in before.items())
