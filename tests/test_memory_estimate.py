"""The memory estimate (trainmesh.memory_estimate) and strategy="auto" deciding by it.

In-process and fast: benchmarks/sharding_memory.py compares the estimate with the bytes real
runs hold.
"""

from __future__ import annotations

import pytest
import torch

import trainmesh as tm
from trainmesh.memory_estimate import (
    estimate_memory,
    measure_activation_bytes,
    optimizer_states_per_parameter,
    zero_formula,
)
from trainmesh.strategies.auto import AutoStrategy

MiB = 2**20


def wide_net(width: int = 256, depth: int = 4) -> torch.nn.Module:
    return torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(depth)])


def test_state_bytes_follow_zero_sharding_for_fp32_adam() -> None:
    model = wide_net()
    psi = sum(p.numel() for p in model.parameters())
    expected = {  # parameters, gradients, optimizer state per rank, N = 4, fp32 Adam
        "single": (4 * psi, 4 * psi, 8 * psi),
        "ddp": (4 * psi, 4 * psi, 8 * psi),
        "zero1": (4 * psi, 4 * psi, 8 * psi // 4),
        "sharded": (psi, psi, 2 * psi),
        "fsdp": (psi, psi, 2 * psi),
        "hsdp": (2 * psi, 2 * psi, 4 * psi),  # shard group of 2 in 4 ranks
        "tp": (psi, psi, 2 * psi),
        "pp": (psi, psi, 2 * psi),
    }
    for strategy, parts in expected.items():
        estimate = estimate_memory(model, strategy=strategy, world_size=4, optimizer="adam", shard_size=2)
        assert (estimate.parameters, estimate.gradients, estimate.optimizer_state) == parts, strategy
    # Sharded holds whole parameters from forward to backward; fsdp one unit at a time.
    assert estimate_memory(model, strategy="sharded", world_size=4).transient == 3 * psi
    assert estimate_memory(model, strategy="fsdp", world_size=4).transient == 0


def test_zero_formulas_match_the_paper() -> None:
    psi, n = 1000, 4
    assert zero_formula("ddp", psi, n, precision="16-mixed") == ("2Ψ+2Ψ+12Ψ", 16 * psi)
    assert zero_formula("zero1", psi, n, precision="16-mixed") == ("2Ψ+2Ψ+12Ψ/N", 4 * psi + 3 * psi)
    assert zero_formula("sharded", psi, n, precision="16-mixed") == ("2Ψ+(2Ψ+12Ψ)/N", 2 * psi + 14 * psi // 4)
    assert zero_formula("fsdp", psi, n, precision="16-mixed") == ("16Ψ/N", 4 * psi)
    assert zero_formula("ddp", psi, n) == ("4Ψ+4Ψ+8Ψ", 16 * psi)


def test_optimizer_states_known_and_probed() -> None:
    param = [torch.nn.Parameter(torch.zeros(3))]
    assert optimizer_states_per_parameter("adamw") == 2
    assert optimizer_states_per_parameter(torch.optim.SGD(param, lr=0.1)) == 0
    assert optimizer_states_per_parameter(torch.optim.SGD(param, lr=0.1, momentum=0.9)) == 1
    # Not in the table: one step on a tiny parameter finds the state.
    assert optimizer_states_per_parameter(torch.optim.Adam(param, amsgrad=True)) == 3
    assert optimizer_states_per_parameter(torch.optim.Adagrad) == 1
    assert optimizer_states_per_parameter(torch.optim.Rprop) == 2  # prev and step sizes
    with pytest.raises(ValueError, match="not known by name"):
        optimizer_states_per_parameter("lion")


def test_bf16_true_halves_every_part_and_mixed_keeps_fp32_state() -> None:
    model = wide_net()
    fp32 = estimate_memory(model, strategy="ddp", world_size=2)
    assert estimate_memory(model, strategy="ddp", world_size=2, precision="bf16-true").state * 2 == fp32.state
    assert estimate_memory(model, strategy="ddp", world_size=2, precision="bf16-mixed").state == fp32.state


def test_activations_are_measured_and_scaled_to_the_batch() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    # Saved for backward, per row: the input (16 floats), ReLU's output (32), the second
    # Linear's input (the same tensor as ReLU's output, counted once).
    assert measure_activation_bytes(model, torch.zeros(64, 16)) == 64 * (16 + 32) * 4
    batch = (torch.zeros(64, 16), torch.zeros(64, dtype=torch.long))
    assert estimate_memory(model, strategy="ddp", world_size=2, batch=batch).activations == 64 * 48 * 4


def test_activation_probe_leaves_batch_norm_statistics_alone() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    before = model[1].running_mean.clone()
    measure_activation_bytes(model, torch.randn(8, 4))
    assert torch.equal(model[1].running_mean, before)


def test_auto_picks_ddp_when_it_fits_and_fsdp_when_only_it_fits() -> None:
    model = wide_net()  # ~1 MiB of fp32 parameters: ddp with Adam needs 4 MiB per rank
    fits = tm.Trainer(accelerator="cpu", devices=2, strategy=AutoStrategy(memory_budget=64 * MiB), logger=False)
    assert fits.strategy.name == "ddp"  # provisional until the model is known
    fits.runtime.trainer_port.choose_strategy(model)
    assert fits.strategy.name == "ddp"
    assert 'strategy="auto" picked ddp' in fits.runtime.strategy_choice  # printed by rank 0 once it trains
    tight = tm.Trainer(accelerator="cpu", devices=2, strategy=AutoStrategy(memory_budget=int(2.2 * MiB)), logger=False)
    tight.runtime.trainer_port.choose_strategy(model)
    assert tight.strategy.name == "fsdp"
    line = tight.runtime.strategy_choice
    assert "picked fsdp" in line and "ddp needs 4.0 MiB" in line and "2.2 MiB per device" in line


def test_auto_starts_the_chosen_strategy_s_workers_with_its_environment() -> None:
    # On CPU fsdp asks for torch's huge pages in its workers (worker_environment, read once at a
    # process's first CPU tensor); ddp, the provisional choice, asks for nothing and starts its
    # processes the same way, so the launcher built for ddp must not be the one that starts fsdp's.
    trainer = tm.Trainer(
        accelerator="cpu", devices=2, strategy=AutoStrategy(memory_budget=int(2.2 * MiB)), logger=False
    )
    assert trainer.runtime.launcher.environment == {}
    trainer.runtime.trainer_port.choose_strategy(wide_net())
    assert trainer.strategy.name == "fsdp"
    assert trainer.runtime.launcher.environment == {"THP_MEM_ALLOC_ENABLE": "1"} == trainer.strategy.worker_environment


def test_auto_order_goes_through_zero1_and_sharded() -> None:
    model = wide_net()
    ddp, zero1 = (estimate_memory(model, strategy=s, world_size=2).peak for s in ("ddp", "zero1"))
    assert AutoStrategy(memory_budget=ddp - 1).choose(model, world_size=2)[0] == "zero1"
    assert AutoStrategy(memory_budget=zero1 - 1).choose(model, world_size=2)[0] == "sharded"


def test_auto_says_what_to_use_when_nothing_fits() -> None:
    with pytest.raises(ValueError, match="fsdp_tp.*'pp'"):
        AutoStrategy(memory_budget=MiB).choose(wide_net(), world_size=2)


def test_auto_with_one_device_stays_single() -> None:
    trainer = tm.Trainer(accelerator="cpu", devices=1, strategy=AutoStrategy(memory_budget=1), logger=False)
    trainer.runtime.trainer_port.choose_strategy(wide_net())
    assert trainer.strategy.name == "single"


def test_estimate_command_prints_every_strategy_beside_zero(capsys: pytest.CaptureFixture[str]) -> None:
    from trainmesh.cli.main import main

    status = main(
        [
            "estimate",
            "--model",
            "trainmesh.demo:DigitsClassifier",
            "--world_size",
            "4",
            "--precision",
            "16-mixed",
            "--batch_shape",
            "32,64",
        ]
    )
    out = capsys.readouterr().out
    assert status == 0
    for strategy in ("single", "ddp", "zero1", "sharded", "fsdp", "hsdp"):
        assert f"\n{strategy} " in out or out.startswith(f"{strategy} ")
    assert "2Ψ+2Ψ+12Ψ/N" in out and "16Ψ/N" in out


def test_trainer_fit_decides_before_the_processes_start(monkeypatch: pytest.MonkeyPatch) -> None:
    trainer = tm.Trainer(
        accelerator="cpu", devices=2, strategy=AutoStrategy(memory_budget=int(2.2 * MiB)), logger=False
    )
    launched: list[str] = []
    # Stands in for starting the processes: what matters is the strategy they would start with.
    monkeypatch.setattr(trainer.runtime, "launch", lambda *args, **kwargs: launched.append(trainer.strategy.name))
    trainer.fit(_WideModule())
    assert launched == ["fsdp"]
    assert tm.estimate_memory is estimate_memory


class _WideModule(tm.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = wide_net()

    # fit refuses a module without these before anything starts (trainer/stage_requirements.py)
    def training_step(self, batch, batch_idx):
        return self.net(batch[0]).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class _BuiltInConfigureModel(tm.Module):
    """Its 1M parameters exist only once configure_model has run."""

    def __init__(self) -> None:
        super().__init__()
        self.net: torch.nn.Module | None = None

    def configure_model(self) -> None:
        if self.net is None:
            self.net = wide_net(width=500, depth=4)


def test_auto_counts_the_layers_configure_model_builds() -> None:
    module = _BuiltInConfigureModel()
    ddp = estimate_memory(wide_net(width=500, depth=4), strategy="ddp", world_size=2).peak
    trainer = tm.Trainer(accelerator="cpu", devices=2, strategy=AutoStrategy(memory_budget=ddp - 1), logger=False)
    trainer.runtime.trainer_port.choose_strategy(module)
    line = trainer.runtime.strategy_choice
    assert trainer.strategy.name == "zero1", line  # before, the empty module looked small enough for ddp
    assert "built in configure_model" in line
    assert module.net is None  # built on a copy: the module the run builds is untouched


def test_auto_says_so_when_configure_model_cannot_run_ahead() -> None:
    class NeedsMesh(tm.Module):
        def configure_model(self, mesh) -> None:
            self.net = torch.nn.Linear(4, 4, device=mesh.device_mesh.device_type)

    trainer = tm.Trainer(accelerator="cpu", devices=2, strategy=AutoStrategy(memory_budget=MiB), logger=False)
    with pytest.raises(ValueError, match="configure_model.*Name the strategy"):
        trainer.runtime.trainer_port.choose_strategy(NeedsMesh())


def test_mixed_precision_activations_are_measured_under_autocast() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    batch = torch.zeros(64, 16)
    fp32 = measure_activation_bytes(model, batch)
    bf16 = measure_activation_bytes(model, batch, precision="bf16-mixed")
    # Per row the saved inputs are 16-bit: half of fp32's 48 floats; besides, once per forward,
    # autocast's bf16 copy of the second weight (32x4), which does not grow with the rows (the
    # first layer's weight is not saved: its input needs no gradient).
    assert fp32 == 64 * 48 * 4
    assert bf16 == 64 * 48 * 2 + 32 * 4 * 2, (bf16, fp32)
    estimate = estimate_memory(model, strategy="ddp", world_size=2, precision="bf16-mixed", batch=batch)
    assert estimate.activations == bf16
