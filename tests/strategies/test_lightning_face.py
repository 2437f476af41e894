"""Lightning's collectives and ranks on ``trainer.strategy`` on one process, compared with what
Lightning 2.6's own strategy answers inside the same program (2 processes: tests/strategies/test_ddp.py)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import differences, run_both, trainer_kwargs


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


# A worker's environment as torchrun (and trainmesh's own agent) sets it: rank 1 of 2 on one node.
_WORKER_1 = {"RANK": "1", "LOCAL_RANK": "1", "GROUP_RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}


def _ranks_before_fit(framework, strategy: str) -> dict[str, object]:
    """What a script reads before ``fit`` (a directory made on global zero only, a learning rate
    scaled by the world size): Lightning's strategy has its ranks from the Trainer's construction on."""
    trainer = framework.Trainer(
        accelerator="cpu", devices=2, strategy=strategy, logger=False, enable_progress_bar=False
    )
    names = ("global_rank", "local_rank", "node_rank", "world_size", "is_global_zero")
    return {
        "trainer": [getattr(trainer, name) for name in names],
        "strategy": [getattr(trainer.strategy, name) for name in names],
    }


@pytest.mark.parametrize(
    "strategy, environment", [("ddp_spawn", {}), ("ddp", _WORKER_1)], ids=["launching_process", "worker_rank_1"]
)
def test_ranks_before_fit_answer_as_lightning_s(monkeypatch, strategy, environment) -> None:
    # Before: world_size 1 everywhere, and the worker of rank 1 said global_rank 0, is_global_zero True.
    lightning = pytest.importorskip("lightning.pytorch")
    from lightning.fabric.utilities.rank_zero import rank_zero_only as fabric_rank_zero
    from lightning_utilities.core.rank_zero import rank_zero_only as utilities_rank_zero

    import trainmesh

    for name in ("RANK", "LOCAL_RANK", "GROUP_RANK", "NODE_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    env = {**environment, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29555"} if environment else {}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    # Lightning's construction sets the process-wide rank_zero_only.rank: put it back for later tests
    monkeypatch.setattr(fabric_rank_zero, "rank", getattr(fabric_rank_zero, "rank", 0))
    monkeypatch.setattr(utilities_rank_zero, "rank", getattr(utilities_rank_zero, "rank", 0))
    expected = _ranks_before_fit(lightning, strategy)
    rank = int(environment.get("RANK", 0))
    assert expected["trainer"] == expected["strategy"] == [rank, rank, 0, 2, rank == 0]
    assert _ranks_before_fit(trainmesh, strategy) == expected


def test_a_spawned_run_pickles_a_trainer_whose_strategy_the_program_read() -> None:
    # ddp_spawn pickles the Runtime with its strategy; reading trainer.strategy (to print it, or
    # isinstance(trainer.strategy, DDPStrategy)) gave the strategy the Trainer's weak reference, and
    # the launch stopped ("Runtime.strategy._served cannot be pickled"), where Lightning's ddp_spawn trains.
    import pickle

    import trainmesh

    trainer = trainmesh.Trainer(accelerator="cpu", devices=2, strategy="ddp_spawn", logger=False)
    assert trainer.strategy.optimizers == []  # serves the Trainer now
    copy = pickle.loads(pickle.dumps(trainer.runtime))
    assert copy.strategy.world_size == 1 and copy.strategy.optimizers == []  # no Trainer served there yet


def restoring_strategy_program(restore: bool):
    def program(L, root):
        calls = []

        class RestoresItself(L.pl.strategies.SingleDeviceStrategy):
            @property
            def lightning_restore_optimizer(self):
                return restore

            def load_optimizer_state_dict(self, checkpoint):
                calls.append("optimizer_states" in checkpoint)
                super().load_optimizer_state_dict(checkpoint)

        class Model(L.pl.LightningModule):
            def __init__(self):
                super().__init__()
                self.layer = torch.nn.Linear(2, 1)

            def training_step(self, batch, batch_idx):
                return self.layer(batch[0]).sum()

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

        found = {}

        class Peek(L.pl.Callback):
            def on_train_start(self, trainer, pl_module):
                state = trainer.optimizers[0].state
                found["momentum"] = [v["momentum_buffer"].clone() for v in state.values()]

        data = DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2)
        strategy = RestoresItself(torch.device("cpu"))
        kwargs = trainer_kwargs(root, max_steps=2, logger=False, enable_checkpointing=False, callbacks=[Peek()])
        ckpt = root / "a.ckpt"
        trainer = L.pl.Trainer(**{**kwargs, "strategy": strategy})
        first = L.pl.Trainer(**trainer_kwargs(root, max_steps=1, logger=False, enable_checkpointing=False))
        torch.manual_seed(0)
        first.fit(Model(), data)
        first.save_checkpoint(ckpt)
        torch.manual_seed(0)
        trainer.fit(Model(), data, ckpt_path=ckpt)
        return {"calls": calls, **found}

    return program


@pytest.mark.parametrize("restore", [True, False])
def test_a_strategy_subclass_restores_the_optimizers_itself_as_in_lightning(restore, tmp_path):
    """Lightning's strategies/test_custom_strategy.py: a resumed fit calls the strategy's
    load_optimizer_state_dict, or restores no optimizer state where lightning_restore_optimizer is
    False (trainmesh restored them itself either way, and never called the override)."""
    found = run_both(restoring_strategy_program(restore), tmp_path)
    assert found["lightning"]["calls"] == ([True] if restore else [])
    assert len(found["lightning"]["momentum"]) == (2 if restore else 0)
    assert differences(found["lightning"], found["trainmesh"]) == []
