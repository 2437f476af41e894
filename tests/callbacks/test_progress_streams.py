"""Where the bars draw, as Lightning 2.6.6's: both on stdout (its TQDMProgressBar passes tqdm
``file=sys.stdout``, its RichProgressBar draws on rich's console), besides what the program prints
and a module's ``self.print``; nothing of the bar on stderr."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import trainmesh

pl = pytest.importorskip("lightning.pytorch")


def _fit(framework, bar_name: str, root) -> None:
    class Printing(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            if batch_idx == 0:
                self.print("the module's own line")
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    bar = getattr(framework.callbacks, bar_name)()
    trainer = framework.Trainer(
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        callbacks=[bar],
        default_root_dir=str(root),
    )
    trainer.fit(Printing(), DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4))
    print("the program's own line")


@pytest.mark.parametrize("bar_name", ["TQDMProgressBar", "RichProgressBar"])
def test_both_bars_draw_on_stdout_with_the_program_s_lines_and_nothing_on_stderr(capsys, tmp_path, bar_name):
    _fit(pl, bar_name, tmp_path / "lightning")
    theirs = capsys.readouterr()
    _fit(trainmesh, bar_name, tmp_path / "trainmesh")
    ours = capsys.readouterr()
    for result in (theirs, ours):
        assert "Epoch 0" in result.out and "Epoch 0" not in result.err
        assert result.out.endswith("the program's own line\n") and "the module's own line" in result.out
