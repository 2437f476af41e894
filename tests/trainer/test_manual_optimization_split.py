"""Manual optimization where a process splits its batch into chunks (dp, ddp2: strategies/
lockstep.py) or its model over devices (layers_on_devices): the checked GAN of
manual_strategies_run.py against the same GAN as plain-torch data-parallel ranks, one rank per
chunk; a closure step; chunks that diverge; the refusals left (dp on GPUs, pipelines).

World sizes: dp and layers_on_devices run in this process, ddp2 on one node in one process of its
own (dp and ddp2 with 2 chunks, as 2 ddp ranks); ddp2 across nodes runs 2 nodes of 2 chunks (as 4
ranks; slow), each node's process a fork with torchrun's variables.
"""

import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from manual_strategies_run import BATCHES, PER_RANK_BATCH, CheckedGAN, chunked_set, reference, run_trainer  # noqa: E402

import trainmesh as tm  # noqa: E402
from helpers.forked import run_forked  # noqa: E402
from helpers.models import quiet_trainer  # noqa: E402
from trainmesh.strategies import DataParallelStrategy, Placement  # noqa: E402
from trainmesh.trainer.manual_optimization import check_manual_settings  # noqa: E402

# The chunks' losses are backpropagated as their mean, in one backward: each parameter's gradient
# sums the chunks' parts in autograd's order, where ddp sums each rank's whole gradient.
TOLERANCE = 1e-6
SCRIPT = HERE / "manual_strategies_run.py"


def assert_close_weights(got: dict, expected: dict, tolerance: float) -> None:
    assert got.keys() == expected.keys()
    for name, tensor in expected.items():
        torch.testing.assert_close(got[name], tensor, rtol=0, atol=tolerance, msg=name)


@pytest.fixture(scope="module")
def two_ranks():
    return reference(2)


@pytest.mark.parametrize("strategy", ["dp", "ddp2"])
def test_the_checked_gan_with_its_batch_in_two_chunks_matches_two_plain_torch_ranks(tmp_path, two_ranks, strategy):
    out = tmp_path / "out.pt"
    if strategy == "dp":
        run_trainer(str(out), strategy, "2")
    else:  # one node: DDP over one process, whose process group must not outlive the run: a process of its own
        env = {**os.environ, "OMP_NUM_THREADS": "1"}  # a fork of this one (torch imported once)
        result = run_forked(SCRIPT, ["trainer", str(out), strategy, "2"], env=env, timeout=120, cwd=HERE)
        assert result.returncode == 0, result.stderr[-3000:]
    got = torch.load(out)
    assert got["global_step"] == 6  # once per opt.step() of the step, not once per chunk
    assert got["lrs"] == two_ranks["lrs"]  # each scheduler stepped once per window
    assert_close_weights(got["state_dict"], two_ranks["state_dict"], TOLERANCE)


def test_the_checked_gan_with_its_layers_on_two_devices_is_bit_identical_to_one_plain_torch_rank(tmp_path):
    run_trainer(str(tmp_path / "out.pt"), "layers_on_devices", "2")
    got, expected = torch.load(tmp_path / "out.pt"), reference(1)
    assert got["global_step"] == 6 and got["lrs"] == expected["lrs"]
    for name, tensor in expected["state_dict"].items():
        assert torch.equal(got["state_dict"][name], tensor), name


def test_the_checked_gan_under_dp_resumes_from_its_checkpoint_as_if_uninterrupted(tmp_path):
    ckpts = str(tmp_path / "ckpts")
    run_trainer(str(tmp_path / "whole.pt"), "dp", "2")
    run_trainer(str(tmp_path / "stopped.pt"), "dp", "2", "1", "2", ckpts)
    run_trainer(str(tmp_path / "resumed.pt"), "dp", "2", "1", "-1", ckpts, "resume")
    whole, stopped, resumed = (torch.load(tmp_path / f"{name}.pt") for name in ("whole", "stopped", "resumed"))
    assert stopped["global_step"] == 2 and resumed["global_step"] == 6 and resumed["lrs"] == whole["lrs"]
    for name, tensor in whole["state_dict"].items():
        assert torch.equal(resumed["state_dict"][name], tensor), name


@pytest.mark.slow
def test_the_checked_gan_under_ddp2_on_two_nodes_matches_four_plain_torch_ranks(tmp_path):
    # Each node's one process a fork of the fork server with the variables torchrun gives a node's
    # worker (the Trainer reads its place from them), not a new interpreter under a torchrun agent
    # (torch imported again, 5 CPU-s each): this checks ddp2's arithmetic across nodes; torchrun's
    # own start of the same leg is tests/strategies/test_dp.py's.
    from trainmesh.launchers.environments import find_free_port

    outs, port = [tmp_path / f"node{rank}.pt" for rank in range(2)], str(find_free_port())
    envs = [
        {
            **os.environ,
            "OMP_NUM_THREADS": "1",
            **dict(RANK=str(node), WORLD_SIZE="2", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", GROUP_RANK=str(node)),
            **dict(MASTER_ADDR="127.0.0.1", MASTER_PORT=port),
        }
        for node in range(2)
    ]
    legs = [["trainer", str(out), "ddp2", "2", "2"] for out in outs]
    with ThreadPoolExecutor(2) as pool:  # both at once: each waits for the other at the rendezvous
        done = list(pool.map(lambda leg, env: run_forked(SCRIPT, leg, env=env, timeout=240, cwd=HERE), legs, envs))
    assert all(d.returncode == 0 for d in done), "\n".join(d.stdout + d.stderr for d in done)[-6000:]
    got, expected = torch.load(outs[0]), reference(4)
    assert got["global_step"] == 6 and got["lrs"] == pytest.approx(expected["lrs"])
    assert_close_weights(got["state_dict"], expected["state_dict"], TOLERANCE)


def regression_data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 6, generator=g)
    return TensorDataset(x, x.sum(1, keepdim=True))


class ClosureSteps(tm.Module):
    """LBFGS, which calls its closure several times per step: the manual-optimization docs' form."""

    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1))
        self.closure_calls = 0

    def training_step(self, batch, batch_idx):
        x, y = batch
        opt = self.optimizers()

        def closure():
            self.closure_calls += 1
            opt.zero_grad()
            loss = nn.functional.mse_loss(self.net(x), y)
            self.manual_backward(loss)
            return loss

        loss = opt.step(closure=closure)
        self.log("loss", loss)

    def configure_optimizers(self):
        return torch.optim.LBFGS(self.parameters(), lr=0.5, max_iter=2)


def test_a_closure_step_under_dp_runs_every_chunks_closure_as_one_batch():
    weights, calls = {}, {}
    for strategy, devices in (("single", 1), ("dp", 2)):
        module = ClosureSteps()
        trainer = quiet_trainer(strategy=strategy, devices=devices, max_epochs=1)
        trainer.fit(module, DataLoader(regression_data(), batch_size=16))
        assert trainer.global_step == 4
        weights[strategy], calls[strategy] = module.net.state_dict(), module.closure_calls
    assert calls["single"] > 4 and calls["dp"] == 2 * calls["single"]  # each call ran both chunks' closures
    # The mean of two chunks' mean losses is the batch's mean loss: one device on the whole batch
    # (seen 3e-8 apart; LBFGS's curvature estimate magnifies the last bits with more iterations).
    assert_close_weights(weights["dp"], weights["single"], 1e-6)
    assert not torch.equal(weights["dp"]["0.weight"], ClosureSteps().net.state_dict()["0.weight"])


class Diverging(CheckedGAN):
    def training_step(self, batch, batch_idx):
        _, y = batch
        opt_g, _ = self.optimizers()
        if int(y[0]) % 2 == 0:  # a branch on this chunk's data: the chunks make different calls
            opt_g.zero_grad()
        self.manual_backward(self(torch.zeros(2, 8)).sum())


def test_chunks_that_make_different_calls_stop_the_step_with_an_error_instead_of_a_hang():
    trainer = quiet_trainer(strategy="dp", devices=2, max_epochs=1, limit_train_batches=BATCHES)
    with pytest.raises(RuntimeError, match=r"every chunk of a manual-optimization step must make the same calls") as e:
        trainer.fit(Diverging(), DataLoader(chunked_set(1, 2), batch_size=2 * PER_RANK_BATCH))
    # Batch 0: chunk 0's first label is even, chunk 1's odd.
    assert "chunk 1 made manual_backward where an earlier chunk made optimizer 0 (Adam).zero_grad()" in str(e.value)


def test_dp_and_ddp2_on_several_gpus_refuse_manual_optimization_and_say_why():
    capabilities = DataParallelStrategy(placement=Placement("cuda", (0, 1))).capabilities
    assert not capabilities.manual_optimization
    with pytest.raises(ValueError, match=r"strategy 'dp' with CheckedGAN.automatic_optimization = False: .*copies"):
        check_manual_settings("dp", capabilities, SimpleNamespace(accumulate_grad_batches=1), CheckedGAN())
    assert DataParallelStrategy(placement=Placement("cpu", (0, 1))).capabilities.manual_optimization


def test_pipeline_parallelism_refuses_manual_optimization_and_says_why():
    from trainmesh.strategies.mesh import ParallelDims
    from trainmesh.strategies.model_parallel_support import model_parallel_capabilities

    pipelined = model_parallel_capabilities(ParallelDims(pp=2, dp_shard=1).resolved(2), replicated=False)
    assert not pipelined.manual_optimization and "schedule" in pipelined.manual_optimization_refusal
    with pytest.raises(ValueError, match=r"strategy 'pp' with CheckedGAN.automatic_optimization = False: a pipeline"):
        check_manual_settings("pp", pipelined, SimpleNamespace(accumulate_grad_batches=1), CheckedGAN())
    tensor_parallel = model_parallel_capabilities(ParallelDims(tp=2, dp_shard=1).resolved(2), replicated=False)
    assert tensor_parallel.manual_optimization  # test_manual_optimization_strategies.py
