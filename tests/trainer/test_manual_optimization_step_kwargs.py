"""``optimizer.step(closure=..., **kwargs)``: what a program gives step besides the closure reaches its
optimizer's ``step``, as Lightning 2.6's ``LightningOptimizer.step(closure=None, **kwargs)`` passes it on,
in manual optimization and from an ``optimizer_step`` override. Before, trainmesh stopped with
"_manual_step() got an unexpected keyword argument" (Lightning's own
trainer/optimization/test_manual_optimization.py::test_step_with_optimizer_closure_with_different_frequencies)."""

import importlib
import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

pl = pytest.importorskip("lightning.pytorch")
FRAMEWORKS = {"lightning": pl, "trainmesh": importlib.import_module("trainmesh")}


class ScaledSGD(torch.optim.SGD):
    """An optimizer whose step takes an argument of its own (a scale of the learning rate)."""

    def __init__(self, params, lr):
        super().__init__(params, lr=lr)
        self.scales = []

    def step(self, closure=None, scale=1.0):
        self.scales.append(scale)
        loss = closure() if closure is not None else None
        with torch.no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    p.add_(p.grad, alpha=-group["lr"] * scale)
        return loss


def _fit(name, manual, root):
    framework = FRAMEWORKS[name]
    torch.manual_seed(0)

    class Net(framework.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)
            self.automatic_optimization = not manual

        def training_step(self, batch, batch_idx):
            loss = self.layer(batch[0]).pow(2).mean()
            if not manual:
                return loss
            opt = self.optimizers()
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step(scale=0.5 * (batch_idx + 1))

        def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
            optimizer.step(closure=optimizer_closure, scale=0.25 * (batch_idx + 1))

        def configure_optimizers(self):
            self.sgd = ScaledSGD(self.parameters(), lr=0.1)
            return self.sgd

    module = Net()
    trainer = framework.Trainer(
        max_epochs=1,
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root / name,  # not the working directory, which the suite's workers share
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, DataLoader(TensorDataset(torch.randn(6, 2)), batch_size=2))
    return module.sgd.scales, module.layer.weight.detach().clone(), trainer.global_step


@pytest.mark.parametrize("manual", [True, False], ids=["manual", "optimizer_step"])
def test_step_arguments_reach_the_optimizer_as_in_lightning(manual, tmp_path):
    scales, weight, steps = _fit("lightning", manual, tmp_path)
    assert scales == ([0.5, 1.0, 1.5] if manual else [0.25, 0.5, 0.75]) and steps == 3
    t_scales, t_weight, t_steps = _fit("trainmesh", manual, tmp_path)
    assert (t_scales, t_steps) == (scales, steps)
    torch.testing.assert_close(t_weight, weight)
