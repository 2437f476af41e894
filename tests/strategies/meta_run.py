"""Leg: transformer layers built in configure_model (meta device under fsdp), 10 Adam steps.

python meta_run.py STRATEGY OUT -> rank 0 saves the full weights at fit start and at the end.
python meta_run.py --batch SPEC.json -> several legs in one launch, one after another (tests/helpers/batches.py)
"""

import faulthandler
import os
import sys

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import trainmesh as tm  # noqa: E402
from helpers.models import quiet_trainer  # noqa: E402


class TinyTransformer(tm.Module):
    def configure_model(self):
        self.layers = torch.nn.Sequential(
            *[torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True) for _ in range(2)]
        )
        self.head = torch.nn.Linear(16, 4)
        self.built_on = self.head.weight.device.type

    def on_fit_start(self):
        # Copies: a state dict shares storage with the parameters, which train on.
        state = self.trainer.runtime.state_dicts(self, [])["model"]
        self.initial = {name: tensor.clone() for name, tensor in state.items()}

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.head(self.layers(x).mean(1)), y)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def main(strategy, out):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(320, 6, 16, generator=g)
    data = TensorDataset(x, x[:, 0, :4].argmax(1))
    model = TinyTransformer()
    trainer = quiet_trainer(strategy=strategy, devices=2, max_steps=10)
    trainer.fit(model, DataLoader(data, batch_size=16))
    final = trainer.runtime.state_dicts(model, [])["model"]
    if trainer.is_global_zero:
        torch.save({"initial": model.initial, "final": final, "built_on": model.built_on}, out)


if __name__ == "__main__":
    if sys.argv[1] == "--batch":
        from helpers.batches import run_batch

        run_batch(sys.argv[2], lambda argv: main(*argv), limit=150)
    else:
        faulthandler.dump_traceback_later(150, exit=True)
        main(sys.argv[1], sys.argv[2])
