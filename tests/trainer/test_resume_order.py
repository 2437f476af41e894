"""A resumed fit restores the module before ``configure_optimizers``, as Lightning 2.6.6 does for a
checkpoint that is not sharded (``trainer.py`` ``_run``: ``_restore_modules_and_callbacks`` before
``strategy.setup`` unless ``strategy.restore_checkpoint_after_setup``, which only its FSDP,
DeepSpeed and ModelParallel strategies set; trainmesh: fsdp's and model parallel's).

The fine-tuning pattern this serves: a module that freezes its backbone when built and unfreezes
it in ``on_load_checkpoint`` when the checkpoint says it was trained. Under Lightning its
optimizer then holds the backbone; with the optimizers built first it would not (and the saved
optimizer state, which holds it, would not fit).
"""

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from helpers.models import quiet_trainer


class FineTune(tm.Module):
    def __init__(self, frozen: bool = True):
        super().__init__()
        torch.manual_seed(0)
        self.backbone = torch.nn.Linear(4, 4)
        self.head = torch.nn.Linear(4, 2)
        self.backbone.requires_grad_(not frozen)
        self.order = []

    def training_step(self, batch, batch_idx):
        return F.cross_entropy(self.head(torch.tanh(self.backbone(batch[0]))), batch[1])

    def on_save_checkpoint(self, checkpoint):
        checkpoint["backbone_trained"] = self.backbone.weight.requires_grad

    def on_load_checkpoint(self, checkpoint):
        self.order.append("on_load_checkpoint")
        self.backbone.requires_grad_(checkpoint["backbone_trained"])

    def configure_optimizers(self):
        self.order.append("configure_optimizers")
        return torch.optim.SGD([p for p in self.parameters() if p.requires_grad], lr=0.1, momentum=0.9)


def _data():
    g = torch.Generator().manual_seed(1)
    return DataLoader(TensorDataset(torch.randn(16, 4, generator=g), torch.randint(0, 2, (16,), generator=g)), 4)


def test_layers_unfrozen_in_on_load_checkpoint_reach_the_optimizer_and_train_as_one_run(tmp_path):
    whole = FineTune(frozen=False)
    quiet_trainer(max_epochs=2).fit(whole, _data())

    first = quiet_trainer(max_epochs=1)
    first.fit(FineTune(frozen=False), _data())
    first.save_checkpoint(tmp_path / "epoch1.ckpt")
    resumed = FineTune()  # frozen when built, as a fine-tuning module is
    trainer = quiet_trainer(max_epochs=2)
    trainer.fit(resumed, _data(), ckpt_path=tmp_path / "epoch1.ckpt")

    assert resumed.order == ["on_load_checkpoint", "configure_optimizers"]  # Lightning's order
    assert len(trainer.optimizers[0].param_groups[0]["params"]) == 4  # the backbone's weight and bias too
    for name, value in whole.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[name], value, rtol=0, atol=1e-6, msg=name)
