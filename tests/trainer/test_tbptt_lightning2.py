"""Lightning 2.6's own TBPTT page (docs/source-pytorch/common/tbptt.rst): a manual-optimization module
that sets ``self.truncated_bptt_steps = 10`` as its own number and splits the batch itself in
``training_step(batch, batch_idx)``. Lightning 2.x has no such attribute and trains it; 1.x's loop
(test_tbptt.py) is only for a ``training_step`` that takes ``hiddens``."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm

pl = pytest.importorskip("lightning.pytorch")


def _docs_module(base):
    class LitModel(base):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False
            self.truncated_bptt_steps = 2
            self.rnn = torch.nn.LSTM(4, 6, batch_first=True)
            self.linear_out = torch.nn.Linear(6, 3)

        def forward(self, x, hs):
            seq, hs = self.rnn(x, hs)
            return self.linear_out(seq), hs

        def training_step(self, batch, batch_idx):
            inputs, targets = batch
            hiddens, optimizer = None, self.optimizers()
            split_x = inputs.tensor_split(self.truncated_bptt_steps, dim=1)
            split_y = targets.tensor_split(self.truncated_bptt_steps, dim=1)
            for x, y in zip(split_x, split_y):
                y_pred, hiddens = self(x, hiddens)
                loss = F.mse_loss(y_pred, y)
                optimizer.zero_grad()
                self.manual_backward(loss)
                optimizer.step()
                hiddens = [h.detach() for h in hiddens]
            self.log("train_loss", loss)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=0.01)

    return LitModel


def _fit(framework, trainer_class):
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(12, 6, 4, generator=generator), torch.randn(12, 6, 3, generator=generator))
    torch.manual_seed(0)
    module = _docs_module(framework)()
    trainer = trainer_class(
        max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False
    )
    trainer.fit(module, DataLoader(data, batch_size=4))
    return trainer.global_step, float(trainer.callback_metrics["train_loss"]), module.state_dict()


def test_the_docs_manual_tbptt_module_trains_as_under_lightning():
    """Before: refused ("truncated_bptt_steps = 2 (Lightning 1.x's ...): automatic optimization only")."""
    steps, loss, weights = _fit(tm.LightningModule, tm.Trainer)
    lightning_steps, lightning_loss, lightning_weights = _fit(pl.LightningModule, pl.Trainer)
    assert steps == lightning_steps == 12  # 3 batches x 2 splits x 2 epochs
    assert loss == pytest.approx(lightning_loss, abs=1e-6)
    for name, value in lightning_weights.items():
        torch.testing.assert_close(weights[name], value, rtol=0, atol=1e-6)
