"""ddp, ddp_spawn and two nodes with real processes on CPU/gloo, world size 2.

The legs that need no launch of their own are listed once in ``plan`` and run once per module,
legs of one world size in one launch (helpers/batches.py), forked with their workers (no
interpreter started per launch or worker); the programs that test no start-up are forked too.
"""

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, Subset

HERE = Path(__file__).parent
SCRIPT = HERE / "ddp_run.py"
sys.path.insert(0, str(HERE))

from ddp_run import Net, dataset  # noqa: E402
from legs import run, weights  # noqa: E402

from helpers.batches import Batches, LegFailed  # noqa: E402
from helpers.forked import forkserver_strategy  # noqa: E402
from helpers.models import quiet_trainer  # noqa: E402
from trainmesh.launchers.environments import find_free_port  # noqa: E402


def plan(root: Path) -> list[tuple[str, int, list[str], dict[str, str]]]:
    """(name, world size, ddp_run.py arguments, environment) of the legs that need no launch of
    their own; legs of one world size run in one launch, one after another in the same processes
    (helpers/batches.py). A leg NAME writes root/NAME (.pt, or .rank{R} per rank). The tests of
    start methods, torchrun nodes, SLURM, an existing process group and failing ranks start
    their own processes."""

    def leg(name, world, mode, *args):
        return name, world, [mode, str(root / name), *args], {}

    return [
        leg("ddp.pt", 2, "trainer", "ddp", "2"),
        leg("evaluate-1001.pt", 2, "evaluate", "1001"),
        leg("evaluate-1.pt", 2, "evaluate", "1"),
        leg("metrics", 2, "metrics"),
        leg("accumulate-4-8.pt", 2, "accumulate", "4", "8"),
        leg("accumulate-1-32.pt", 2, "accumulate", "1", "32"),
        leg("runtime.pt", 2, "runtime"),
        leg("callbacks", 2, "callbacks", str(root / "ckpts")),
        leg("gather-grads.pt", 2, "gather_grads"),
        leg("strategy-face", 2, "strategy_face"),
        leg("val-time", 2, "val_time"),
        ("unused-find", 2, ["unused", "find"], {}),  # (writes no file)
        # Fails in both ranks (torch's reducer error): last in its launch.
        ("unused-default", 2, ["unused", "default"], {}),
        leg("single.pt", 1, "single"),
        leg("single-sgd.pt", 1, "single", "sgd"),
    ]


class Legs(Batches):
    def out(self, name: str) -> Path:
        """The leg's output path, once it ran."""
        self(name)
        return self.root / name


@pytest.fixture(scope="module")
def legs(tmp_path_factory) -> Legs:
    root = tmp_path_factory.mktemp("ddp_legs")
    return Legs(SCRIPT, root, plan(root), leg_timeout=120, cwd=HERE, forked=True, fork_workers=True)


def test_ddp_is_bit_identical_to_the_handwritten_ddp_loop(legs, handwritten):
    saved = torch.load(legs.out("ddp.pt"))
    assert saved["world_size"] == 2
    for name, tensor in handwritten.items():
        assert torch.equal(saved["state_dict"][name], tensor), name
    assert {"train_loss_epoch", "val_loss"} <= set(saved["metrics"])


def test_ddp_spawn_returns_the_trained_weights_to_the_parent(handwritten):
    # ddp_spawn's launcher with its workers forks of the fork server (Lightning's "forkserver"
    # start method): what comes back is the test, not how spawn starts a new interpreter (that:
    # tests/launchers/test_launch_processes.py's spawn_run.py).
    model = Net()
    trainer = quiet_trainer(
        strategy=forkserver_strategy(),
        devices=2,
        max_epochs=2,
        enable_checkpointing=True,
        default_root_dir=str(Path(os.environ.get("TMPDIR", "/tmp")) / f"spawn-{os.getpid()}"),
    )
    trainer.fit(model, DataLoader(dataset(), batch_size=16), DataLoader(dataset(64), batch_size=8))
    for name, tensor in handwritten.items():
        assert torch.equal(model.state_dict()[name], tensor), name
    assert "val_loss" in trainer.callback_metrics and trainer.global_step == 16
    assert Path(trainer.checkpoint_callback.best_model_path).exists()
    # The workers' finished state, as Lightning's spawn launcher returns it (trainer/states.py)
    assert (trainer.state.status, trainer.state.fn, trainer.state.stage) == ("finished", "fit", None)


def test_two_torchrun_nodes_give_the_same_weights(torchrun_nodes, handwritten):
    saved = torch.load(torchrun_nodes("ddp"))
    assert saved["world_size"] == 2
    for name, tensor in handwritten.items():
        assert torch.equal(saved["state_dict"][name], tensor), name


def test_ddp_matches_one_device_with_the_global_batch(legs):
    ddp, single = weights(legs.out("ddp.pt")), weights(legs.out("single.pt"))
    for name in single:
        torch.testing.assert_close(ddp[name], single[name], rtol=0, atol=1e-6)


def test_a_loss_over_outputs_gathered_with_gradients_trains_as_one_process_at_the_global_batch(legs):
    """``self.all_gather(out, sync_grads=True)`` (Lightning's): every process computes the loss of
    the whole gathered batch, its slice gets the sum of every process's gradient for it, and DDP's
    average makes that the one-process gradient of the global batch's loss."""
    gathered, single = weights(legs.out("gather-grads.pt")), weights(legs.out("single-sgd.pt"))
    for name in single:
        torch.testing.assert_close(gathered[name], single[name], atol=1e-5, rtol=1e-5)


def test_lightning_s_collectives_on_trainer_strategy_answer_as_lightning_s_ddp(legs):
    """``trainer.strategy.reduce/all_gather/broadcast/barrier/reduce_boolean_decision`` and its ranks,
    as Lightning's DDPStrategy answers them at 2 processes (rank r contributes r)."""
    out = legs.out("strategy-face")
    for rank in (0, 1):
        face = torch.load(f"{out}.rank{rank}")
        assert (face["world_size"], face["global_rank"], face["is_global_zero"]) == (2, rank, rank == 0)
        assert (face["sum"], face["mean"], face["max"]) == (1.0, 0.5, 1.0)
        # In place, as Lightning's _sync_ddp: the tensor given (and what shares its storage) holds
        # the result (before: a new tensor, and a logged `loss` kept its own rank's value); an
        # integer mean is truncated into the integer tensor (1 / 2 -> 0).
        assert face["view_reduced"] == (1.0, 1.0) and face["same_object"]
        assert face["int_mean"].dtype == torch.int64 and face["int_mean"].item() == 0
        assert face["gather"] == [[0.0], [1.0]] and face["broadcast"] == "from 0"
        assert (face["all_true"], face["any_true"]) == (False, True)


@pytest.mark.parametrize("samples", [1001, 1])  # 1: Lightning's validation gives both ranks sample 0
def test_validate_and_predict_read_lightning_s_shares_and_predict_returns_each_rank_s(legs, samples):
    """Each rank validates its DistributedSampler share (rank r: samples r, r+2, ..., padded by
    repeating sample 0) and predicts its unpadded share, as Lightning's ranks do (their samples:
    tests/trainer/test_evaluation_shares.py); the reference is one process reading each
    rank's share in the same batches. The epoch metrics are the mean of the ranks' (as many samples
    each); each rank returns its own predictions."""
    distributed = torch.load(legs.out(f"evaluate-{samples}.pt"))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the workers' thread count: same kernels, same rounding
    try:
        model, data, trainer = Net(), dataset(samples), quiet_trainer()
        shares = [list(DistributedSampler(range(samples), num_replicas=2, rank=r, shuffle=False)) for r in (0, 1)]
        per_rank = [
            trainer.validate(model, DataLoader(Subset(data, share), batch_size=16), verbose=False)[0]
            for share in shares
        ]
        predicted = [
            torch.cat(trainer.predict(model, DataLoader(Subset(data, range(r, samples, 2)), batch_size=16)))
            if r < samples
            else None
            for r in (0, 1)
        ]
    finally:
        torch.set_num_threads(threads)
    (metrics,) = distributed["metrics"]
    assert metrics.keys() == per_rank[0].keys()
    for name, value in metrics.items():
        assert value == pytest.approx((per_rank[0][name] + per_rank[1][name]) / 2, rel=1e-6), name
    for rank in (0, 1):  # each rank's own predictions (None where it has no sample), as Lightning's ranks
        own = torch.load(f"{legs.out(f'evaluate-{samples}.pt')}-predictions-rank{rank}", weights_only=False)
        assert (own is None) == (predicted[rank] is None)
        if own is not None:
            assert torch.equal(own, predicted[rank])


def test_an_exception_in_rank_1_ends_every_rank_quickly():
    # Ended by rank 1's failure, not by a timeout: the watchdog (300 s by default) never spoke,
    # and the run ended within the hang guard (240 s), far below torch's 30-minute collective
    # timeout. No wall-clock bound tighter than that: a loaded machine stretches any of them.
    result = run(str(SCRIPT), "fail", timeout=240, forked=True)
    assert result.returncode != 0
    assert "planted failure in rank 1 at step 40" in result.stderr
    assert "worker rank 1 failed" in result.stderr
    assert "trainmesh watchdog" not in result.stderr, result.stderr[-3000:]


def test_only_sync_dist_metrics_are_reduced(legs):
    out = legs.out("metrics")
    ranks = [torch.load(f"{out}.rank{rank}") for rank in range(2)]
    for rank, saved in enumerate(ranks):
        metrics = saved["metrics"]
        assert metrics["rank_step"] == rank  # step values stay local
        assert metrics["rank_synced"] == 0.5  # unless sync_dist=True
        assert metrics["rank_epoch"] == rank  # an epoch value without sync_dist stays local (Lightning 2.6)
        assert metrics["tm_mean_rank"] == 0.5  # a torchmetrics Metric syncs itself
        assert saved["gathered"].tolist() == [[0], [1]]
    assert [saved["calls"] for saved in ranks] == [1, 0]  # rank_zero_only


def test_gradient_accumulation_skips_the_all_reduce_until_the_last_micro_batch(legs):
    accumulated, large = legs.out("accumulate-4-8.pt"), legs.out("accumulate-1-32.pt")
    acc, big = torch.load(accumulated), torch.load(large)
    assert acc["steps"] == big["steps"] == 4
    # 16 micro-batches per rank, one gradient bucket: one all-reduce per optimizer step.
    assert acc["allreduce_calls"] == big["allreduce_calls"] == 4
    for name, tensor in big["state_dict"].items():
        torch.testing.assert_close(acc["state_dict"][name], tensor, rtol=0, atol=1e-6)


def test_runtime_makes_the_handwritten_loop_multi_process(legs, handwritten):
    saved = torch.load(legs.out("runtime.pt"))["model"]
    for name, tensor in handwritten.items():
        assert torch.equal(saved[name.removeprefix("net.")], tensor), name


def test_slurm_tasks_are_recognised_and_start_nothing_themselves(tmp_path, handwritten):
    # Two tasks as `srun --ntasks-per-node=2` would start them on one node, each with its task's
    # environment: forks of the fork server where they can be (no second import of torch and
    # trainmesh), which read it as a new interpreter does (the Trainer reads it, not the import).
    port, out = str(find_free_port()), tmp_path / "slurm.pt"

    def task(rank: int) -> subprocess.CompletedProcess:
        env = {
            "SLURM_NTASKS": "2",
            "SLURM_PROCID": str(rank),
            "SLURM_LOCALID": str(rank),
            "SLURM_NODEID": "0",
            "SLURM_NODELIST": "127.0.0.1",
            "SLURM_NTASKS_PER_NODE": "2",
            "SLURM_JOB_ID": "4242",
            "SLURM_JOB_NAME": "train",
            "MASTER_PORT": port,
        }
        return run(str(SCRIPT), "trainer", str(out), "ddp", "2", env=env, timeout=120, forked=True)

    with ThreadPoolExecutor(2) as pool:  # both at once: each waits for the other at the rendezvous
        tasks = list(pool.map(task, range(2)))
    for result in tasks:
        assert result.returncode == 0, result.stderr[-3000:]
    saved = torch.load(out)
    assert saved["world_size"] == 2
    for name, tensor in handwritten.items():
        assert torch.equal(saved["state_dict"][name], tensor), name


def _lightning_unused_parameters_words():
    """What Lightning 2.6's DDPStrategy.on_exception makes of torch's reducer error (one process)."""
    from lightning.pytorch.strategies import DDPStrategy as LightningDDP

    err = RuntimeError("Expected to have finished reduction in the prior iteration before starting a new one. ...")
    LightningDDP().on_exception(err)
    return err.args[0]


def test_unused_parameters_error_names_the_option_and_the_option_fixes_it(legs):
    with pytest.raises(LegFailed) as failed:
        legs("unused-default")
    # Lightning's words, in torch's RuntimeError (l-ddp-progs5 h6: a DQN's target network)
    assert f"RuntimeError: {_lightning_unused_parameters_words()}" in str(failed.value)
    legs("unused-find")  # LegFailed, with its traceback, if it failed


def test_ddp_fork_returns_the_trained_weights_to_the_parent(handwritten):
    # Start this process's OpenMP pool first: a forked worker that inherits it must not hang.
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    a = torch.randn(256, 256)
    for _ in range(5):
        a @ a
    torch.set_num_threads(threads)
    model = Net()
    trainer = quiet_trainer(strategy="ddp_fork", devices=2, max_epochs=2)
    trainer.fit(model, DataLoader(dataset(), batch_size=16))
    for name, tensor in handwritten.items():
        assert torch.equal(model.state_dict()[name], tensor), name


def test_an_existing_process_group_is_used_as_it_is(tmp_path, handwritten):
    out = tmp_path / "existing.pt"
    result = run(str(SCRIPT), "existing", str(out), forked=True)
    assert result.returncode == 0, result.stderr[-3000:]
    saved = torch.load(out)
    for name, tensor in handwritten.items():
        assert torch.equal(saved["state_dict"][name], tensor), name


def test_a_time_based_val_check_interval_follows_rank_0s_clock(legs):
    """Rank 1's clock runs 5x faster than rank 0's: both validate where rank 0's says (its 3 s: every 3rd
    of the 8 batches), where Lightning lets each rank decide by its own clock."""
    out = legs.out("val-time")
    assert [torch.load(f"{out}.rank{rank}") for rank in range(2)] == [[3, 6], [3, 6]]


def test_checkpoint_and_early_stopping_decide_the_same_on_every_rank(legs):
    out, directory = legs.out("callbacks"), legs.root / "ckpts"
    ranks = [torch.load(f"{out}.rank{rank}") for rank in range(2)]
    assert ranks[0] == ranks[1]  # same stopping epoch, same best path, same kept files
    assert ranks[0]["epoch"] == 2  # epoch 0 sets the best, epoch 1 fails to improve by 10: patience 1 spent
    assert sorted(p.name for p in directory.iterdir()) == sorted(
        [Path(p).name for p in ranks[0]["kept"]] + ["last.ckpt"]
    )
