"""Lightning 1.x's truncated backpropagation through time (``truncated_bptt_steps``, ``tbptt_split_batch``,
``training_step(batch, batch_idx, hiddens)``) runs as pytorch-lightning 1.9.5 ran it.

The expected weights, global_step, metrics, learning rate and call lists were taken from pytorch-lightning
1.9.5 (torch 2.13 CPU) running the program of tbptt_run.py with ``pytorch_lightning.LightningModule``,
``Callback`` and ``Trainer`` in trainmesh's place (tbptt_lightning_1_9.json holds the numbers;
record_tbptt_lightning_1_9.py regenerates them in a 1.9.5 venv; its --ddp, the ddp legs' from 1.9.5 under
ddp); the suite does not need it installed.
"""

import json
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from tbptt_run import Rnn, data, fit  # noqa: E402

from helpers.batches import Batches  # noqa: E402
from helpers.models import quiet_trainer  # noqa: E402

LIGHTNING_1_9 = json.loads((HERE / "tbptt_lightning_1_9.json").read_text())
_START = [("cb.on_train_batch_start", 0), ("on_train_batch_start", 0, 0)]
_SPLIT = [("on_before_zero_grad",), ("on_after_backward",)]  # a split of a window's first batch
# Lightning 1.9.5's calls over the first two batches: three splits (time steps 2, 2, 1) each, the first with
# hiddens None; an optimizer step per split (global_step 3 after batch 0), zero_grad at every split of a
# window's first batch and none in a window's later batch (acc).
FIRST_CALLS = {
    "plain": [
        *_START,
        *[("training_step", 0, 2, True), *_SPLIT, ("training_step", 0, 2, False), *_SPLIT],
        *[("training_step", 0, 1, False), *_SPLIT, ("on_train_batch_end", 0, 3)],
        *[("cb.on_train_batch_start", 1), ("on_train_batch_start", 1, 3), ("training_step", 1, 2, True)],
    ],
    "acc": [
        *_START,
        *[("training_step", 0, 2, True), *_SPLIT, ("training_step", 0, 2, False), *_SPLIT],
        *[("training_step", 0, 1, False), *_SPLIT, ("on_train_batch_end", 0, 0)],
        *[("cb.on_train_batch_start", 1), ("on_train_batch_start", 1, 0), ("training_step", 1, 2, True)],
        *[("on_after_backward",), ("training_step", 1, 2, False), ("on_after_backward",)],
        *[("training_step", 1, 1, False), ("on_after_backward",), ("on_train_batch_end", 1, 3)],
    ],
    "split": [
        *[*_START, ("tbptt_split_batch", 5, 2), ("training_step", 0, 1, True), *_SPLIT],
        *[("training_step", 0, 2, False), *_SPLIT, ("training_step", 0, 2, False), *_SPLIT],
        *[("on_train_batch_end", 0, 3), ("cb.on_train_batch_start", 1)],
    ],
}
# 1.9.5's outputs: on_train_batch_end gets one dict per split (hiddens left out), training_epoch_end a list of those.
_BATCH_END = [["extra", "loss"]] * 3


def assert_lightning_1_9_weights(state_dict, variant, atol, recorded=LIGHTNING_1_9):
    for name, want in recorded[variant]["weights"].items():
        got = state_dict[name].detach().flatten()
        torch.testing.assert_close(got, torch.tensor(want), rtol=0, atol=atol, msg=f"{variant}: {name}")


@pytest.mark.parametrize("variant", ["plain", "acc", "split"])
def test_a_gru_with_truncated_bptt_trains_lightning_1_9s_weights_with_its_calls(variant):
    """A GRU, truncated_bptt_steps=2 over sequences of 5, clipping and a step scheduler (once per batch): 1.x's
    default split, under accumulate_grad_batches=2, and a tbptt_split_batch override."""
    reference = LIGHTNING_1_9[variant]
    with pytest.warns(FutureWarning, match=r"(Rnn|Split).truncated_bptt_steps = 2: .*removed in Lightning 2.0.*manual"):
        module, trainer = fit(variant)
    assert trainer.global_step == reference["global_step"]
    assert module.calls[: len(FIRST_CALLS[variant])] == FIRST_CALLS[variant]
    assert len(module.calls) == reference["calls"]
    assert module.shapes == {"batch_end": _BATCH_END, "epoch_end": [_BATCH_END] * 4}
    metrics = {name: round(float(value), 7) for name, value in trainer.callback_metrics.items()}
    assert metrics == pytest.approx(reference["metrics"], abs=2e-7)
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(reference["lr"])
    assert_lightning_1_9_weights(module.state_dict(), variant, atol=1e-6)


@pytest.mark.parametrize("variant", ["turns", "turns_acc"])
def test_truncated_bptt_with_two_optimizers_nests_their_turns_in_each_split_as_lightning_1_9(variant):
    """training_step(batch, batch_idx, optimizer_idx, hiddens) with two optimizers (1.9 nests the optimizer
    turns inside each split, one hidden state carried from each training_step to the next): 1.9.5's whole
    call list (each turn's hiddens, global_step at each on_before_optimizer_step), outputs, metrics, lr and
    weights, recorded by record_tbptt_lightning_1_9.py."""
    reference = LIGHTNING_1_9[variant]
    with pytest.warns(FutureWarning, match=r"Turns.truncated_bptt_steps = 2: .*removed in Lightning 2.0"):
        module, trainer = fit(variant)
    assert trainer.global_step == reference["global_step"]
    assert [list(call) for call in module.calls] == reference["call_list"]
    assert module.shapes == reference["shapes"]  # each split's outputs: a list of the turns' outputs
    metrics = {name: round(float(value), 7) for name, value in trainer.callback_metrics.items()}
    assert metrics == pytest.approx(reference["metrics"], abs=2e-7)
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(reference["lr"])
    assert_lightning_1_9_weights(module.state_dict(), variant, atol=1e-6)


@pytest.fixture(scope="module")
def ddp_legs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tbptt")
    plan = [(f"{v}.pt", 2, ["trainer", str(root / f"{v}.pt"), v, "ddp", "2"], {}) for v in ("plain", "acc", "turns")]
    batches = Batches(HERE / "tbptt_run.py", root, plan, leg_timeout=120, cwd=HERE, forked=True, fork_workers=True)

    def saved(name):
        batches(name)
        return torch.load(root / name)

    return saved


@pytest.mark.parametrize("variant", ["plain", "acc", "turns"])
def test_truncated_bptt_under_ddp_trains_lightning_1_9s_ddp_weights(ddp_legs, variant):
    """Two processes, each splitting its half of each batch of 4 along time, read through the
    DistributedSampler(shuffle=True, seed=0) that 1.9.5 (as 2.6) gives a training loader under ddp: the
    weights are those of pytorch-lightning 1.9.5 itself under ddp on 2 CPU processes (the entry "ddp")."""
    saved = ddp_legs(f"{variant}.pt")
    assert saved["global_step"] == LIGHTNING_1_9["ddp"][variant]["global_step"]
    assert_lightning_1_9_weights(saved["state_dict"], variant, atol=1e-6, recorded=LIGHTNING_1_9["ddp"])


class _Manual(Rnn):
    def __init__(self):
        super().__init__("plain")
        self.automatic_optimization = False


class _NoHiddens(Rnn):
    def __init__(self):
        super().__init__("plain")

    def training_step(self, batch, batch_idx, hiddens):
        return super().training_step(batch, batch_idx, hiddens)["loss"]


@pytest.mark.parametrize(
    ("make", "strategy", "match"),
    [
        (lambda: Rnn("plain"), "dp", r"runs under strategy 'single' or 'ddp'.*not under 'dp'.*manual optimization"),
        (_Manual, "auto", r"truncated_bptt_steps = 2 .*automatic optimization only"),
        (_NoHiddens, "auto", r"training_step did not return \{\"loss\": \.\.\., \"hiddens\": \.\.\.\}"),
    ],
)
def test_what_truncated_bptt_does_not_run_is_refused(make, strategy, match):
    """A strategy its weights were not checked under and manual optimization stop before training; a
    training_step without hiddens at its first split, as 1.9 did."""
    module = make()
    trainer = quiet_trainer(max_epochs=1, strategy=strategy)
    with pytest.warns(FutureWarning) if make is _NoHiddens else _nothing(), pytest.raises(ValueError, match=match):
        trainer.fit(module, data())
    assert trainer.global_step == 0


def test_tbptt_split_batch_without_truncated_bptt_steps_is_not_called_and_says_so():
    """1.9 called tbptt_split_batch only where truncated_bptt_steps > 0: the whole batch trains, with a warning."""

    class Whole(Rnn):
        def __init__(self):
            super().__init__("plain")
            self.truncated_bptt_steps = 0

        def training_step(self, batch, batch_idx, hiddens=None):
            return super().training_step(batch, batch_idx, hiddens)["loss"]

        def tbptt_split_batch(self, batch, split_size):
            raise AssertionError("not called")

    module = Whole()
    with pytest.warns(UserWarning, match=r"Whole.tbptt_split_batch is not called: .*truncated_bptt_steps > 0"):
        trainer = quiet_trainer(max_epochs=1)
        trainer.fit(module, data())
    assert trainer.global_step == 4
    assert [call[2] for call in module.calls if call[0] == "training_step"] == [5] * 4


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
