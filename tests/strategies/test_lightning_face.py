"""Lightning's collectives and ranks on ``trainer.strategy`` on one process, compared with what
Lightning 2.6's own strategy answers inside the same program (2 processes: tests/strategies/test_ddp.py)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset


def _answers(framework) -> dict[str, object]:
    seen: dict[str, object] = {}

    class Model(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def on_train_start(self) -> None:
            strategy, value = self.trainer.strategy, torch.tensor([3.0])
            strategy.barrier()
            seen.update(
                world_size=strategy.world_size,
                global_rank=strategy.global_rank,
                local_rank=strategy.local_rank,
                is_global_zero=strategy.is_global_zero,
                reduced=strategy.reduce(value, reduce_op="sum").tolist(),
                gathered=strategy.all_gather(value).tolist(),
                broadcast=strategy.broadcast({"a": 1}),
                decision=(strategy.reduce_boolean_decision(False), strategy.reduce_boolean_decision(True, all=False)),
            )

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = framework.Trainer(
        max_steps=1,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Model(), DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2))
    return seen


def test_trainer_strategy_collectives_on_one_process_answer_as_lightning_s() -> None:
    lightning = pytest.importorskip("lightning.pytorch")
    import trainmesh

    expected = _answers(lightning)
    assert expected["gathered"] == [3.0] and expected["decision"] == (False, True)
    assert _answers(trainmesh) == expected
