"""A loss normalised by the global count of valid tokens: ``training_step`` returns ``{"loss":
summed, "num_tokens": n}`` and every layout (accumulation, dp, ddp, zero1, fsdp, pipelines) trains
as one process on the whole batch with the mean over its valid tokens, while a plain mean loss
averages per-batch means (token_loss_run.py: the Llama test model, uneven ignore_index padding).

Tolerance: weights within WEIGHT_ATOL (3e-5, derived below) after 4 AdamW steps (lr 1e-3), and the
loss the loop reports at each step within ATOL (1e-5). The summed layouts measured within 1.3e-5 of
the reference (weights: AdamW's eps amplifying the rounding of two near-0 gradients) and 9e-7
(losses); gradients left summed (today's main) land 3e-4 away, and ddp's mean of per-rank means
5.6e-3.
"""

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import trainmesh as tm

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))

from token_loss_run import CONFIG  # noqa: E402

from helpers.batches import Batches  # noqa: E402
from helpers.llama import IGNORE_INDEX, Llama, token_loader  # noqa: E402
from helpers.models import fp16_on_cpu, quiet_trainer  # noqa: E402

SCRIPT = HERE / "token_loss_run.py"
ATOL = 1e-5
# Weights: AdamW's first step moves a weight by lr * g / (|g| + eps), so where g is near 0 a change
# dg in g's float32 rounding moves it by up to lr * dg / eps. In the samples the Trainer's shuffling
# sampler deals (seed 0) two first gradients are that small: layers.1.feed_forward.w2[14, 17] is
# 6.4e-10 under the mean loss and 7.8e-10 as sum / count, layers.2.feed_forward.w1[53, 21] -3.39e-9
# and -3.18e-9; 1.5e-10 and 2.1e-10 apart (an ulp of those layers' largest gradients, 2.8e-3 and
# 3.5e-3), which lr 1e-3 / eps 1e-8 turn into 1.28e-5 and 1.2e-5, the largest weight gaps measured
# over the layouts. Two such ulps (lr * 4.7e-10 / eps) bound it at 4.7e-5; 3e-5 stays 10x under
# gradients left summed (3e-4).
WEIGHT_ATOL = 3e-5
CLIP = 0.05

# name -> (world size, layout, options); legs of one world size share a launch.
LEGS = {
    "reference": (1, "single", {"summed": 0}),  # one process, the whole batch, the mean loss
    "reference_clipped": (1, "single", {"summed": 0, "clip": CLIP}),
    "single_whole": (1, "single", {}),
    "single_accumulate": (1, "single", {"accumulate": 2}),
    "single_accumulate_clipped": (1, "single", {"accumulate": 2, "clip": CLIP}),
    "dp": (1, "dp", {}),
    "ddp": (2, "ddp", {}),
    "ddp_accumulate": (2, "ddp", {"accumulate": 2}),
    "zero1": (2, "zero1", {}),
    "fsdp": (2, "fsdp", {}),
    "pp_gpipe": (2, "pp_gpipe", {}),
    "pp_1f1b_accumulate_clipped": (2, "pp_1f1b", {"accumulate": 2, "clip": CLIP}),
    "ddp_mean": (2, "ddp", {"summed": 0}),
    "pp_gpipe_mean": (2, "pp_gpipe", {"summed": 0}),
}


@pytest.fixture(scope="module")
def legs(tmp_path_factory):
    root = tmp_path_factory.mktemp("token_loss")
    plan = [
        (name, world, [str(root / f"{name}.pt"), layout, *(f"{k}={v}" for k, v in options.items())], {})
        for name, (world, layout, options) in LEGS.items()
    ]
    batches = Batches(SCRIPT, root, plan, leg_timeout=120, cwd=HERE, forked=True, fork_workers=True)

    def saved(name: str) -> dict:
        batches(name)
        return torch.load(root / f"{name}.pt")

    return saved


def weight_gap(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a if a[k].is_floating_point())


@pytest.mark.parametrize(
    "name", ["single_whole", "single_accumulate", "dp", "ddp", "ddp_accumulate", "zero1", "fsdp", "pp_gpipe"]
)
def test_a_summed_loss_trains_every_layout_as_one_process_on_the_whole_batch(legs, name):
    run, reference = legs(name), legs("reference")
    assert run["steps"] == reference["steps"] == 4
    assert weight_gap(run["state_dict"], reference["state_dict"]) < WEIGHT_ATOL
    # The loss the loop reports is the global batch's mean (sum over tokens / global count).
    assert run["losses"] == pytest.approx(reference["losses"], abs=ATOL)


@pytest.mark.parametrize("name", ["single_accumulate_clipped", "pp_1f1b_accumulate_clipped"])
def test_gradients_are_divided_by_the_token_count_before_clipping(legs, name):
    run, reference = legs(name), legs("reference_clipped")
    assert weight_gap(reference["state_dict"], legs("reference")["state_dict"]) > 1e-4  # the clip bites
    assert weight_gap(run["state_dict"], reference["state_dict"]) < WEIGHT_ATOL
    assert run["losses"] == pytest.approx(reference["losses"], abs=ATOL)


@pytest.mark.parametrize(
    ("name", "whole"), [("pp_gpipe", "single_whole"), ("pp_gpipe_mean", "reference"), ("ddp", "single_whole")]
)
def test_batch_end_hooks_get_the_outputs_one_process_gets(legs, name, whole):
    # on_train_batch_end's outputs: the loss tensor for a mean loss, {"loss", "num_tokens",
    # "first_tokens"} for the summed one, under every layout. Under a pipeline they are the whole
    # batch's (the micro-batches' sums and counts added up, their per-sample rows concatenated), as
    # one process's; ddp's are its rank's. Before, a pipeline gave {"loss"} alone either way, so a
    # callback logging loss per token broke only there.
    run, reference = legs(name)["outputs"], legs(whole)["outputs"]
    assert len(run) == len(reference) == 4
    assert [o["keys"] for o in run] == [o["keys"] for o in reference]
    if name == "pp_gpipe":  # (a mean loss's mean of micro-batch means is not the batch's mean)
        assert [o["num_tokens"] for o in run] == [o["num_tokens"] for o in reference]
        assert [o["first"] for o in run] == [o["first"] for o in reference]
        assert [o["loss"] for o in run] == pytest.approx([o["loss"] for o in reference], rel=1e-5)
    if whole == "single_whole":  # valid tokens in the global batches the shuffling sampler deals (seed 0)
        assert [o["num_tokens"] for o in reference] == [53.0, 58.0, 58.0, 61.0]


def test_a_mean_loss_under_uneven_padding_averages_the_ranks_means(legs):
    """The documented semantics of ``return loss``: each rank's mean over its own tokens, and DDP
    averages those means, so a rank's token weighs by 1 / its rank's count, not 1 / the global one."""
    mean, summed, reference = legs("ddp_mean"), legs("ddp"), legs("reference")
    assert weight_gap(mean["state_dict"], reference["state_dict"]) > 1e-3
    assert weight_gap(summed["state_dict"], reference["state_dict"]) < WEIGHT_ATOL


class FirstFiniteGradients(tm.Callback):
    """The first optimizer step's gradients that are finite, as on_before_optimizer_step sees them
    (unscaled, not yet clipped), and which step that was: under 16-mixed GradScaler skips the steps
    whose scaled gradients overflowed (a summed loss's do at its first scale) and lowers the scale."""

    def __init__(self):
        self.step, self.grads = -1, None

    def on_before_optimizer_step(self, trainer, module, optimizer):
        if self.grads is not None:
            return
        self.step += 1
        grads = {n: p.grad.detach().float().clone() for n, p in module.named_parameters() if p.grad is not None}
        if all(bool(g.isfinite().all()) for g in grads.values()):
            self.grads = grads
            trainer.should_stop = True


def mean_loss_gradients(rows: slice) -> tuple[float, dict]:
    """One process, the mean loss over the valid tokens of these rows at the initial weights, and its gradients."""
    torch.manual_seed(0)
    model = Llama(CONFIG)
    tokens, targets = token_loader(CONFIG).dataset[rows]
    loss = F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX)
    loss.backward()
    return loss.item(), {n: p.grad for n, p in model.named_parameters()}


def test_16_mixed_unscales_the_token_normalised_gradients():
    """GradScaler's scale and the division by the token count compose: on_before_optimizer_step
    sees the mean loss's gradients (fp16 autocast error aside). The skipped steps leave the
    weights as they were, so the reference is the initial weights on that step's batch."""
    seen = FirstFiniteGradients()
    torch.manual_seed(0)
    # 4 steps an epoch; the first 3 overflow here (the scale falls from 2**16 to 2**13).
    trainer = quiet_trainer(max_steps=8, accumulate_grad_batches=2, callbacks=[seen], **fp16_on_cpu())
    trainer.fit(Llama(CONFIG, summed_loss=True), token_loader(CONFIG, batch_size=4))
    assert seen.grads is not None, "every step overflowed"
    first_row = 8 * (seen.step % 4)
    _, reference = mean_loss_gradients(slice(first_row, first_row + 8))
    flat = torch.cat([g.flatten() for g in reference.values()])
    gap = torch.cat([(seen.grads[n] - g).flatten() for n, g in reference.items()])
    assert gap.norm() / flat.norm() < 1e-2


def test_num_tokens_with_manual_optimization_is_refused():
    class Manual(Llama):
        def __init__(self, config):
            super().__init__(config, summed_loss=True)
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            optimizer = self.optimizers()
            output = super().training_step(batch, batch_idx)
            self.manual_backward(output["loss"])
            optimizer.step()
            optimizer.zero_grad()
            return output

    with pytest.raises(ValueError, match="num_tokens with manual optimization"):
        quiet_trainer(max_epochs=1).fit(Manual(CONFIG), token_loader(CONFIG, batch_size=8))


def test_summed_and_mean_losses_in_one_optimizer_step_are_refused():
    class Alternating(Llama):
        def training_step(self, batch, batch_idx):
            self.summed_loss = batch_idx % 2 == 0
            return super().training_step(batch, batch_idx)

    with pytest.raises(ValueError, match="num_tokens for some batches of one optimizer step"):
        quiet_trainer(max_steps=1, accumulate_grad_batches=2).fit(
            Alternating(CONFIG), token_loader(CONFIG, batch_size=4)
        )


@pytest.mark.parametrize("count", [-3, 2.5, [1, 2], torch.ones(2), torch.tensor(True)])
def test_a_count_that_is_not_one_number_of_tokens_is_refused(count):
    class BadCount(Llama):
        def training_step(self, batch, batch_idx):
            return {**super().training_step(batch, batch_idx), "num_tokens": count}

    with pytest.raises(ValueError, match="num_tokens="):
        quiet_trainer(max_steps=1).fit(BadCount(CONFIG, summed_loss=True), token_loader(CONFIG, batch_size=8))


def test_a_users_loop_divides_by_the_token_count_with_normalize_gradients():
    runtime = tm.Runtime(accelerator="cpu", devices=1)
    torch.manual_seed(0)
    model, _ = runtime.setup(Llama(CONFIG, summed_loss=True), torch.optim.SGD([torch.zeros(1)], lr=0.1))
    tokens, targets = token_loader(CONFIG).dataset[0:8]
    results = [runtime.train_step(model, (tokens[rows], targets[rows]), 0) for rows in (slice(0, 3), slice(3, 8))]
    mean = runtime.normalize_gradients(model, sum(r.num_tokens for r in results), loss_sum=sum(r.loss for r in results))
    reference_loss, reference = mean_loss_gradients(slice(0, 8))
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, reference[name], rtol=1e-5, atol=1e-7)
    assert float(mean) == pytest.approx(reference_loss, abs=1e-6)
