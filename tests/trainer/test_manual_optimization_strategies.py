"""Manual optimization under every data-parallel strategy: a two-optimizer GAN that accumulates
with ``no_backward_sync``, clips with ``self.clip_gradients`` and steps its schedulers, compared
with the same GAN written in plain torch (``manual_strategies_run.reference``), and resumed from
a checkpoint holding both optimizers and schedulers.

World sizes: zero1, sharded, fsdp and tp run on 2 processes (one launch, shared: tp=2 is one
data-parallel rank, so its reference is one plain-torch rank); hsdp and fsdp_tp need a 2-D mesh,
so 4 processes (hsdp: 2 shard groups of 2; fsdp_tp: tp=2 x 2 data-parallel shards; slow).
dp, ddp2 and layers_on_devices: test_manual_optimization_split.py. pp refuses manual optimization
(checked on 2 processes, one stage each).
"""

import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from manual_strategies_run import reference  # noqa: E402

from helpers.batches import Batches  # noqa: E402

SCRIPT = HERE / "manual_strategies_run.py"
TWO = ("zero1", "sharded", "fsdp")
# Against ddp's weights: zero1 steps the same arithmetic (each rank its shard, then a broadcast);
# sharded and fsdp reduce-scatter the gradients and take the clipping norm over shards.
TOLERANCE = {"zero1": 0.0, "sharded": 1e-6, "fsdp": 1e-6}
# Each tensor-parallel rank computes a share of each layer's sums, added up in another order.
TP_TOLERANCE = 1e-6


def plan(root: Path) -> list:
    def leg(name: str, world: int, strategy: str, *rest: str) -> tuple:
        return (name, world, ["trainer", str(root / name), strategy, str(world), "1", *rest], {})

    legs = [leg("ddp.pt", 2, "ddp")] + [leg(f"{name}.pt", 2, name) for name in (*TWO, "tp")]
    for name in (*TWO, "tp"):  # stopped after the first window (two optimizer steps), resumed to the end
        ckpts = str(root / f"ckpts-{name}")
        legs += [leg(f"{name}-stopped.pt", 2, name, "2", ckpts), leg(f"{name}-resumed.pt", 2, name, "-1", ckpts, "1")]
    legs.append(("pp-refused.pt", 2, ["refused", str(root / "pp-refused.pt"), "pp", "2"], {}))
    ckpts = str(root / "ckpts-hsdp")
    legs += [
        leg("hsdp.pt", 4, "hsdp2x2"),
        leg("hsdp-stopped.pt", 4, "hsdp2x2", "2", ckpts),
        leg("hsdp-resumed.pt", 4, "hsdp2x2", "-1", ckpts, "1"),
        leg("fsdp_tp.pt", 4, "fsdp_tp"),
    ]
    return legs


@pytest.fixture(scope="module")
def legs(tmp_path_factory):
    root = tmp_path_factory.mktemp("manual-strategies")
    batches = Batches(SCRIPT, root, plan(root), leg_timeout=120, cwd=HERE, forked=True, fork_workers=True)

    def saved(name: str) -> dict:
        batches(name)
        return torch.load(root / name)

    return saved


def assert_same_weights(got: dict, expected: dict, tolerance: float) -> None:
    assert got.keys() == expected.keys()
    for name, tensor in expected.items():
        if tolerance == 0.0:
            assert torch.equal(got[name], tensor), name
        else:
            torch.testing.assert_close(got[name], tensor, rtol=0, atol=tolerance, msg=name)


def test_the_checked_gan_under_ddp_is_bit_identical_to_plain_torch_data_parallel(legs):
    ddp, expected = legs("ddp.pt"), reference(2)
    assert ddp["global_step"] == 6  # 3 accumulation windows, two optimizer steps each
    assert ddp["lrs"] == expected["lrs"] == [pytest.approx(0.7**3 * 2e-3)] * 2  # each scheduler stepped 3 times
    assert_same_weights(ddp["state_dict"], expected["state_dict"], 0.0)
    # Clipping changes the result here, so the equality above shows it ran.
    unclipped = reference(2, clip=None)["state_dict"]
    assert not torch.equal(unclipped["discriminator.0.weight"], expected["state_dict"]["discriminator.0.weight"])


@pytest.mark.parametrize("strategy", TWO)
def test_the_checked_gan_matches_ddp(legs, strategy):
    got, ddp = legs(f"{strategy}.pt"), legs("ddp.pt")
    assert got["global_step"] == 6 and got["lrs"] == ddp["lrs"]
    assert_same_weights(got["state_dict"], ddp["state_dict"], TOLERANCE[strategy])


@pytest.mark.parametrize("strategy", TWO)
def test_the_checked_gan_resumed_from_its_checkpoint_matches_the_uninterrupted_run(legs, strategy):
    stopped, resumed, whole = legs(f"{strategy}-stopped.pt"), legs(f"{strategy}-resumed.pt"), legs(f"{strategy}.pt")
    assert stopped["global_step"] == 2 and resumed["global_step"] == 6
    assert not torch.equal(
        stopped["state_dict"]["discriminator.0.weight"], whole["state_dict"]["discriminator.0.weight"]
    )
    assert resumed["lrs"] == whole["lrs"]  # both schedulers' state came back
    assert_same_weights(resumed["state_dict"], whole["state_dict"], 0.0)  # both optimizers' state too


@pytest.mark.slow
def test_the_checked_gan_under_hsdp_matches_plain_torch_and_resumes(legs):
    # 2 shard groups of 2 processes against 4 plain-torch ranks: the reduce-scatter, the all-reduce
    # across groups and the clipping norm over shards sum in another order.
    hsdp, expected = legs("hsdp.pt"), reference(4)
    assert hsdp["global_step"] == 6 and hsdp["lrs"] == pytest.approx(expected["lrs"])
    assert_same_weights(hsdp["state_dict"], expected["state_dict"], 1e-6)
    stopped, resumed = legs("hsdp-stopped.pt"), legs("hsdp-resumed.pt")
    assert stopped["global_step"] == 2 and resumed["global_step"] == 6
    assert_same_weights(resumed["state_dict"], hsdp["state_dict"], 0.0)


def test_the_checked_gan_under_tensor_parallelism_matches_plain_torch_and_resumes(legs):
    tp, expected = legs("tp.pt"), reference(1)  # tp=2 on 2 processes: one data-parallel rank
    assert tp["global_step"] == 6 and tp["lrs"] == expected["lrs"]
    assert_same_weights(tp["state_dict"], expected["state_dict"], TP_TOLERANCE)
    stopped, resumed = legs("tp-stopped.pt"), legs("tp-resumed.pt")
    assert stopped["global_step"] == 2 and resumed["global_step"] == 6 and resumed["lrs"] == tp["lrs"]
    assert_same_weights(resumed["state_dict"], tp["state_dict"], 0.0)


@pytest.mark.slow
def test_the_checked_gan_under_fsdp_with_tensor_parallelism_matches_plain_torch(legs):
    got, expected = legs("fsdp_tp.pt"), reference(2)  # tp=2 x 2 data-parallel shards
    assert got["global_step"] == 6 and got["lrs"] == pytest.approx(expected["lrs"])
    assert_same_weights(got["state_dict"], expected["state_dict"], TP_TOLERANCE)


def test_a_pipeline_refuses_manual_optimization_before_placing_the_model_and_says_why(legs):
    refused = legs("pp-refused.pt")  # pp=2: each process one stage
    assert refused["error"].startswith("strategy 'model_parallel' with CheckedGAN.automatic_optimization = False")
    assert "a pipeline schedule" in refused["error"] and "Return the loss from training_step" in refused["error"]
    assert refused["untouched"] and refused["global_step"] == 0
