"""Two CPU processes under ``strategy="ddp"`` with ``precision="16-mixed"`` (Lightning 2.6 trains
"bf16-mixed" there, warning on rank 0), then with ``plugins=[MixedPrecision("16-mixed", "cpu")]``
(float16 with a GradScaler), in one launch: ``python precision_ddp_run.py lightning|trainmesh OUT``.
Each rank writes OUT/rank<r>.pt: per run the precision, the plugin's class and scaler, the dtype of
``self(x)``, the precision warnings it saw, the losses and the trained weights."""

import sys
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

if sys.argv[1] == "lightning":
    import lightning.pytorch as pl
    from lightning.pytorch.plugins import MixedPrecision
else:
    import trainmesh as pl
    from trainmesh.plugins import MixedPrecision


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
        self.losses, self.out_dtype = [], None

    def training_step(self, batch, batch_idx):
        out = self.net(batch[0])
        self.out_dtype = str(out.dtype)
        loss = F.mse_loss(out, batch[1])
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(**precision):
    pl.seed_everything(3)
    x = torch.randn(32, 8)
    y = torch.randn(32, 1)
    model = Model()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = pl.Trainer(
            accelerator="cpu", devices=2, strategy="ddp", max_steps=3, logger=False, enable_progress_bar=False,
            enable_model_summary=False, enable_checkpointing=False, **precision,
        )  # fmt: skip
        trainer.fit(model, DataLoader(TensorDataset(x, y), batch_size=4))
    plugin = trainer.precision_plugin
    return {
        "precision": trainer.precision,
        "plugin": (type(plugin).__name__, plugin.precision, type(getattr(plugin, "scaler", None)).__name__),
        "out_dtype": model.out_dtype,
        "warnings": sorted({str(w.message) for w in caught if "precision" in str(w.message)}),
        "losses": model.losses,
        "weights": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "rank": trainer.global_rank,
    }


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    runs = {"16-mixed": fit(precision="16-mixed"), "plugin": fit(plugins=[MixedPrecision("16-mixed", "cpu")])}
    torch.save(runs, out / f"rank{runs['plugin']['rank']}.pt")


if __name__ == "__main__":
    main(Path(sys.argv[2]))
