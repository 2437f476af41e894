"""Lightning's form of ``ModelParallelStrategy`` (``data_parallel_size=``, ``tensor_parallel_size=``,
``save_distributed_checkpoint=``), against Lightning 2.6's own run at 2 CPU processes.

The module's ``configure_model`` reads ``self.device_mesh`` (named ``("data_parallel",
"tensor_parallel")``) and applies ``parallelize_module`` and ``fully_shard`` itself, as Lightning's
tensor-parallel example and torchtitan's ``parallelize`` functions do; trainmesh applies nothing on
top. One launch per framework (tests/strategies/lightning_model_parallel_run.py): tensor parallel
(1 x 2), data parallel (2 x 1), and a fit resumed from one whole-state file
(``save_distributed_checkpoint=False``). Before, trainmesh refused these arguments.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from helpers.beside_lightning import run_beside_lightning
from trainmesh.strategies import ModelParallelStrategy
from trainmesh.strategies.lightning_model_parallel import (
    LightningForm,
    check_module_parallelized,
    lightning_form,
    resolved_sizes,
)

SCRIPT = Path(__file__).resolve().parent / "lightning_model_parallel_run.py"
CASES = ["tensor_parallel", "data_parallel", "resumed"]


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    pytest.importorskip("lightning.pytorch")
    out = tmp_path_factory.mktemp("lightning_model_parallel")
    run_beside_lightning(SCRIPT, out, lightning_ranks=2)  # Lightning's 2 ranks as torchrun's workers, forked
    return out


def _load(out: Path, framework: str, case: str, rank: int) -> dict:
    return torch.load(out / framework / f"{case}-rank{rank}.pt", weights_only=False)


@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 1])
@pytest.mark.parametrize("case", CASES)
def test_lightning_s_form_trains_lightning_s_weights_and_metrics(records, case, rank):
    theirs, ours = _load(records, "lightning", case, rank), _load(records, "trainmesh", case, rank)
    assert ours["mesh"] == theirs["mesh"]  # the names and sizes configure_model saw
    assert ours["weights"].keys() == theirs["weights"].keys()
    for name, tensor in theirs["weights"].items():
        assert torch.allclose(ours["weights"][name], tensor, rtol=0, atol=1e-6), name
    assert ours["metrics"] == pytest.approx(theirs["metrics"], abs=1e-6)
    assert ours["files"] == theirs["files"]  # a folder each (distributed checkpoint), or one file


@pytest.mark.slow
def test_save_distributed_checkpoint_false_writes_whole_tensors_as_lightning(records):
    theirs, ours = (
        _load(records, "lightning", "resumed", 0)["saved"],
        _load(records, "trainmesh", "resumed", 0)["saved"],
    )
    assert {k: kind for k, (kind, _) in ours.items()} == {k: kind for k, (kind, _) in theirs.items()}
    assert all(kind == "Tensor" for kind, _ in ours.values())
    assert all(torch.allclose(ours[k][1], theirs[k][1], rtol=0, atol=1e-6) for k in theirs)


def test_the_two_forms_are_told_apart_by_the_arguments_given():
    assert lightning_form({}) is None
    assert lightning_form({"save_distributed_checkpoint": False}) == LightningForm(save_distributed_checkpoint=False)
    # Lightning's "auto": data parallel across nodes, tensor parallel within one
    assert resolved_sizes(LightningForm(), world_size=4, num_nodes=1) == (1, 4)
    assert resolved_sizes(LightningForm(data_parallel_size=2, tensor_parallel_size=2), world_size=4, num_nodes=1) == (
        2,
        2,
    )
    with pytest.raises(RuntimeError, match=r"`tensor_parallel_size=4` multiplied should equal the world size \(4\)"):
        resolved_sizes(LightningForm(data_parallel_size=2), world_size=4, num_nodes=1)  # as Lightning: "auto" is 4
    with pytest.raises(ValueError, match="Give one form's arguments"):
        ModelParallelStrategy(data_parallel_size=2, dp_shard=2)

    # Fabric 2.6's form, its function first (positionally or by name), kept when the strategy is rebuilt
    # (tests/fabric/test_fabric_ddp.py trains it beside Fabric)
    def parallelize(module, mesh):
        return module

    for strategy in (ModelParallelStrategy(parallelize), ModelParallelStrategy(parallelize_fn=parallelize)):
        assert strategy.init_arguments == {"parallelize_fn": parallelize}
        assert strategy.with_placement(strategy.placement)._lightning.parallelize_fn is parallelize


class _Configured(nn.Linear):
    def configure_model(self):
        pass


def test_data_parallel_ranks_without_fully_shard_are_refused_before_training():
    # Lightning trains such a module with no word, each data-parallel rank on its own weights
    with pytest.raises(ValueError, match=r"applied no fully_shard .* each train their own weights"):
        check_module_parallelized(_Configured(2, 2), 2)
    check_module_parallelized(_Configured(2, 2), 1)  # one data-parallel rank: nothing to reduce
    with pytest.raises(
        ValueError, match=r"parallelize_fn applied no fully_shard \(or replicate\) on device_mesh\['data_parallel'\]"
    ):
        check_module_parallelized(nn.Linear(2, 2), 2, by_fabric=True)  # Fabric's form: no configure_model needed


def test_a_module_without_configure_model_gets_lightning_s_type_error():
    import trainmesh

    # Lightning 2.6's words (its ModelParallelStrategy.setup)
    message = r"When using the ModelParallelStrategy, you are required to override the `configure_model\(\)` hook"
    for base in (trainmesh.LightningModule, nn.Module):
        with pytest.raises(TypeError, match=message):
            check_module_parallelized(type("Plain", (base,), {})(), 1)


def test_a_trainer_refuses_fabric_s_parallelize_fn_with_lightning_s_type_error(tmp_path):
    # Lightning's Trainer-side class takes no parallelize_fn (its TypeError, at the strategy's construction);
    # trainmesh's class is Fabric's too, so its Trainer refuses it as it is built, before any process starts
    import trainmesh

    def parallelize(module, mesh):
        return module

    lightning = pytest.importorskip("lightning.pytorch")
    with pytest.raises(TypeError) as theirs:
        lightning.Trainer(strategy=lightning.strategies.ModelParallelStrategy(parallelize_fn=parallelize))
    with pytest.raises(TypeError) as ours:
        trainmesh.Trainer(strategy=ModelParallelStrategy(parallelize_fn=parallelize), default_root_dir=tmp_path)
    assert str(ours.value).startswith(str(theirs.value))


RANKS_PROGRAM = """
import os, sys, time
imported = "lightning.pytorch" in sys.modules
from lightning.pytorch.utilities.rank_zero import rank_zero_only
print("RANK", os.environ["RANK"], "OF", os.environ["WORLD_SIZE"], "LOCAL", os.environ["LOCAL_RANK"],
      "ELASTIC", "TORCHELASTIC_RUN_ID" in os.environ, "PORT", os.environ["MASTER_PORT"], flush=True)
print("RANK", os.environ["RANK"], "IMPORTED", imported, "RANK_ZERO_ONLY", rank_zero_only.rank, flush=True)
if os.environ["RANK"] == "1":
    raise RuntimeError("planted failure in rank 1")
time.sleep(600)  # rank 0 "waits in a collective" for a peer that is gone
"""


def test_lightning_s_forked_ranks_get_torchrun_s_variables_and_a_failing_rank_stops_the_others(tmp_path):
    """``run_beside_lightning(lightning_ranks=2)``'s ranks (helpers/forked.py's ``torchrun``): what
    torchrun gives its workers, and rank 1's failure ends rank 0 too, as torchrun's agent ends them
    (not the 600 s rank 0 would wait). Its ``preload``: each rank finds Lightning imported (once,
    before the forks) and its ``rank_zero_only.rank`` its own RANK, as its own import would set it."""
    from helpers.forked import can_fork, run_forked

    pytest.importorskip("lightning.pytorch")
    if not can_fork():
        pytest.skip("no fork server on this platform: run_beside_lightning runs Lightning's own launcher there")
    program = tmp_path / "ranks.py"
    program.write_text(RANKS_PROGRAM)
    env = {"PATH": "/usr/bin:/bin", "MASTER_PORT": "29555", "OMP_NUM_THREADS": "1"}  # as every test process
    preload = ("lightning.pytorch",)
    done = run_forked(program, [], env=env, timeout=240, cwd=tmp_path, world=2, torchrun=True, preload=preload)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "RuntimeError: planted failure in rank 1" in done.stderr
    for rank in (0, 1):
        assert f"RANK {rank} OF 2 LOCAL {rank} ELASTIC True PORT 29555" in done.stdout, done.stdout
        assert f"RANK {rank} IMPORTED True RANK_ZERO_ONLY {rank}" in done.stdout, done.stdout
