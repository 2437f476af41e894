"""Manual optimization (automatic_optimization = False): a two-optimizer GAN on the digits under
single, ddp and fsdp, compared with a hand-written torch DDP loop, and resumed mid-epoch."""

import sys
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from manual_optimization_run import GAN, PER_RANK_BATCH, train_set  # noqa: E402

from helpers.batches import Batches  # noqa: E402
from helpers.models import quiet_trainer  # noqa: E402

SCRIPT = HERE / "manual_optimization_run.py"


def plan(root: Path) -> list:
    ckpts = str(root / "ckpts")
    return [
        # The hand-written loop first: its workers fork while its process has one thread.
        ("handwritten.pt", 1, ["handwritten", str(root / "handwritten.pt")], {}),
        ("single.pt", 1, ["trainer", str(root / "single.pt"), "single", "1"], {}),
        ("ddp.pt", 2, ["trainer", str(root / "ddp.pt"), "ddp", "2"], {}),
        ("stopped.pt", 2, ["trainer", str(root / "stopped.pt"), "ddp", "2", "4", ckpts], {}),
        ("resumed.pt", 2, ["trainer", str(root / "resumed.pt"), "ddp", "2", "12", ckpts, "resume"], {}),
        ("fsdp.pt", 2, ["trainer", str(root / "fsdp.pt"), "fsdp", "2"], {}),
    ]


@pytest.fixture(scope="module")
def legs(tmp_path_factory):
    root = tmp_path_factory.mktemp("manual")
    batches = Batches(SCRIPT, root, plan(root), leg_timeout=120, cwd=HERE, forked=True, fork_workers=True)

    def saved(name: str) -> dict:
        batches(name)
        return torch.load(root / name)

    return saved


def test_a_manual_gan_under_ddp_is_bit_identical_to_a_handwritten_ddp_loop(legs):
    ddp, reference = legs("ddp.pt"), legs("handwritten.pt")["state_dict"]
    assert ddp["global_step"] == 12  # 6 batches, two optimizer steps each
    assert ddp["find_unused"] is True  # each backward reaches one optimizer's parameters
    for name, tensor in reference.items():
        assert torch.equal(ddp["state_dict"][name], tensor), name
    single = legs("single.pt")  # one process, half the data per step: trained, and differently
    assert single["global_step"] == 12
    assert not torch.equal(single["state_dict"]["generator.0.weight"], reference["generator.0.weight"])


def test_a_manual_gan_resumed_mid_epoch_is_bit_identical_to_the_uninterrupted_run(legs):
    stopped, resumed, whole = legs("stopped.pt"), legs("resumed.pt"), legs("ddp.pt")
    assert stopped["global_step"] == 4 and resumed["global_step"] == 12
    assert not torch.equal(
        stopped["state_dict"]["discriminator.0.weight"], whole["state_dict"]["discriminator.0.weight"]
    )
    for name, tensor in whole["state_dict"].items():
        assert torch.equal(resumed["state_dict"][name], tensor), name


def test_a_manual_gan_under_fsdp_matches_ddp(legs):
    # Same arithmetic on CPU (reduce-scatter of a 2-way mean): equal to 1e-6, seen bit-identical.
    fsdp, ddp = legs("fsdp.pt"), legs("ddp.pt")
    assert fsdp["global_step"] == 12
    for name, tensor in ddp["state_dict"].items():
        torch.testing.assert_close(fsdp["state_dict"][name], tensor, rtol=0, atol=1e-6, msg=name)


@pytest.mark.parametrize(
    "option, fix",
    [({"accumulate_grad_batches": 2}, "every N batches"), ({"gradient_clip_val": 1.0}, "self.clip_gradients")],
)
def test_loop_accumulation_or_clipping_with_manual_optimization_is_refused(option, fix):
    trainer = quiet_trainer(max_steps=2, **option)
    with pytest.raises(ValueError, match="automatic_optimization = False") as raised:
        trainer.fit(GAN(), DataLoader(train_set(), batch_size=PER_RANK_BATCH))
    assert fix in str(raised.value)
