"""Lightning 1.x's ``optimizer_idx``: several optimizers in automatic optimization (training_step once
per optimizer, toggled, with frequencies) and the optimizer hooks' 1.x signatures.

The expected weights and call lists were taken from pytorch-lightning 1.9.5 (torch 2.13 CPU) running
the program of optimizer_idx_run.py with ``pytorch_lightning.LightningModule`` as the base class; the ddp
legs' from 1.9.5 itself under ddp (optimizer_idx_lightning_1_9.json, written by
record_optimizer_idx_lightning_1_9.py in a 1.9.5 venv); the suite does not need it installed.
"""

import json
import re
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from optimizer_idx_run import Gan, data, fit  # noqa: E402
from optimizer_step_run import CLIP, SAMPLES, Net, sgd, torch_reference, warm_up  # noqa: E402

import trainmesh as tm  # noqa: E402
from helpers.batches import Batches  # noqa: E402
from helpers.models import quiet_trainer, random_classification  # noqa: E402

# Lightning 1.9.5: global_step (every optimizer step counts), the number of recorded calls, the calls
# up to the first training_step of a later batch, and the weights after 2 epochs (rounded to 7 places).
_S, _A = "SGD", "Adam"
LIGHTNING_1_9 = {
    "plain": (
        24,
        194,
        [
            ("optimizer_step", 0, 0, False, False),
            ("training_step", 0, 0),
            ("on_before_zero_grad", _S),
            ("optimizer_zero_grad", 0, 0),
            ("backward", _S, 0),
            ("cb.on_before_optimizer_step", 0),
            ("on_before_optimizer_step", _S, 0),
            ("configure_gradient_clipping", 0, 0.5),
            ("optimizer_step", 0, 1, False, False),
            ("training_step", 0, 1),
            ("on_before_zero_grad", _A),
            ("optimizer_zero_grad", 0, 1),
            ("backward", _A, 1),
            ("cb.on_before_optimizer_step", 1),
            ("on_before_optimizer_step", _A, 1),
            ("configure_gradient_clipping", 1, 0.5),
            ("optimizer_step", 1, 0, False, False),
        ],
        {
            "g.weight": [
                0.0032651,
                0.3378552,
                -0.4164942,
                -0.4117814,
                -0.1798262,
                0.2441841,
                -0.0268631,
                0.4101582,
                -0.1491515,
                0.1430441,
                -0.2053868,
                -0.1792973,
            ],
            "g.bias": [-0.37048, -0.1021235, -0.5479024, -0.184835],
            "d.weight": [0.2611668, 0.3240945, -0.3220243, -0.2328987],
            "d.bias": [0.0751014],
        },
    ),
    "freq": (
        12,
        104,
        [
            ("optimizer_step", 0, 0, False, False),
            ("training_step", 0, 0),
            ("on_before_zero_grad", _S),
            ("optimizer_zero_grad", 0, 0),
            ("backward", _S, 0),
            ("cb.on_before_optimizer_step", 0),
            ("on_before_optimizer_step", _S, 0),
            ("configure_gradient_clipping", 0, 0.5),
            ("optimizer_step", 1, 1, False, False),
            ("training_step", 1, 1),
            ("on_before_zero_grad", _A),
            ("optimizer_zero_grad", 1, 1),
            ("backward", _A, 1),
            ("cb.on_before_optimizer_step", 1),
            ("on_before_optimizer_step", _A, 1),
            ("configure_gradient_clipping", 1, 0.5),
            ("lr_scheduler_step", 1),
            ("optimizer_step", 2, 1, False, False),
            ("training_step", 2, 1),
            ("on_before_zero_grad", _A),
            ("optimizer_zero_grad", 2, 1),
            ("backward", _A, 1),
            ("cb.on_before_optimizer_step", 1),
            ("on_before_optimizer_step", _A, 1),
            ("configure_gradient_clipping", 1, 0.5),
            ("lr_scheduler_step", 1),
            ("optimizer_step", 3, 0, False, False),
        ],
        {
            "g.weight": [
                -0.0054791,
                0.3338057,
                -0.4690933,
                -0.4267579,
                -0.1882051,
                0.1637053,
                -0.0094195,
                0.4182816,
                -0.0613573,
                0.1541437,
                -0.1997264,
                -0.1200457,
            ],
            "g.bias": [-0.5033373, -0.3166327, -0.3155221, -0.0273161],
            "d.weight": [0.2356132, 0.2699085, -0.3322993, -0.2123085],
            "d.bias": [0.1477613],
        },
    ),
    "acc": (
        12,
        122,
        [
            ("training_step", 0, 0),
            ("on_before_zero_grad", _S),
            ("optimizer_zero_grad", 0, 0),
            ("backward", _S, 0),
            ("training_step", 0, 1),
            ("on_before_zero_grad", _A),
            ("optimizer_zero_grad", 0, 1),
            ("backward", _A, 1),
            ("optimizer_step", 1, 0, False, False),
            ("training_step", 1, 0),
            ("backward", _S, 0),
            ("cb.on_before_optimizer_step", 0),
            ("on_before_optimizer_step", _S, 0),
            ("configure_gradient_clipping", 0, 0.5),
            ("optimizer_step", 1, 1, False, False),
            ("training_step", 1, 1),
            ("backward", _A, 1),
            ("cb.on_before_optimizer_step", 1),
            ("on_before_optimizer_step", _A, 1),
            ("configure_gradient_clipping", 1, 0.5),
        ],
        {
            "g.weight": [
                -0.0025018,
                0.3189107,
                -0.4546531,
                -0.4223241,
                -0.2084116,
                0.1847464,
                -0.0144603,
                0.442006,
                -0.0838668,
                0.1508686,
                -0.1845539,
                -0.1355881,
            ],
            "g.bias": [-0.4906458, -0.2925732, -0.337367, -0.0444511],
            "d.weight": [0.2471363, 0.3194399, -0.3334886, -0.2325314],
            "d.bias": [0.1276642],
        },
    ),
}


# Lightning 1.9.5 under ddp on 2 CPU processes: global_step and weights (record_optimizer_idx_lightning_1_9.py).
LIGHTNING_1_9_DDP = json.loads((HERE / "optimizer_idx_lightning_1_9.json").read_text())


def assert_lightning_1_9_weights(state_dict, variant, atol, weights=None):
    for name, want in (weights or LIGHTNING_1_9[variant][3]).items():
        got = state_dict[name].detach().flatten()
        torch.testing.assert_close(got, torch.tensor(want), rtol=0, atol=atol, msg=f"{variant}: {name}")


@pytest.mark.parametrize("variant", ["plain", "freq", "acc"])
def test_a_1x_gan_trains_lightning_1_9s_weights_with_its_calls(variant):
    """Two optimizers ([g, d]; dicts with frequencies 1 and 2, g's epoch scheduler (1.x never steps it:
    g is not active at an epoch's last batch) and d's step scheduler; accumulation over 2 batches), a warm-up in the 1.x optimizer_step, clipping and every optimizer hook with optimizer_idx."""
    global_step, count, first_calls, _ = LIGHTNING_1_9[variant]
    with pytest.warns(FutureWarning, match="training_step takes optimizer_idx.*manual optimization"):
        module, trainer = fit(variant)
    assert trainer.global_step == global_step
    assert module.calls[: len(first_calls)] == first_calls
    assert len(module.calls) == count
    assert_lightning_1_9_weights(module.state_dict(), variant, atol=1e-6)


def test_each_optimizer_step_is_counted_as_it_completes_as_lightning_1_9_counts_it(monkeypatch):
    """1.9.5 counts global_step after each optimizer's step (its optim_progress), so the second optimizer's
    hooks see the first one's step: (optimizer_idx, global_step) at on_before_optimizer_step over the first
    three batches, as pytorch-lightning 1.9.5 printed them running optimizer_idx_run.py's "plain" Gan."""
    seen = []

    def on_before_optimizer_step(self, optimizer, optimizer_idx):
        seen.append((optimizer_idx, self.trainer.global_step))

    monkeypatch.setattr(Gan, "on_before_optimizer_step", on_before_optimizer_step)
    with pytest.warns(FutureWarning, match="training_step takes optimizer_idx"):
        fit("plain")
    assert seen[:6] == [(0, 0), (1, 1), (0, 2), (1, 3), (0, 4), (1, 5)]


@pytest.fixture(scope="module")
def ddp_legs(tmp_path_factory):
    root = tmp_path_factory.mktemp("optimizer_idx")
    plan = [(f"{v}.pt", 2, ["trainer", str(root / f"{v}.pt"), v, "ddp", "2"], {}) for v in ("plain", "acc")]
    batches = Batches(
        HERE / "optimizer_idx_run.py", root, plan, leg_timeout=120, cwd=HERE, forked=True, fork_workers=True
    )

    def saved(name):
        batches(name)
        return torch.load(root / name)

    return saved


@pytest.mark.parametrize("variant", ["plain", "acc"])
def test_a_1x_gan_under_ddp_trains_lightning_1_9s_ddp_weights(ddp_legs, variant):
    """Two processes, each with half of each batch of 4, read through the DistributedSampler(shuffle=True,
    seed=0) that 1.9.5 (as 2.6) gives a training loader under ddp: the weights are those of
    pytorch-lightning 1.9.5 itself under ddp on 2 CPU processes (Adam included)."""
    saved = ddp_legs(f"{variant}.pt")
    recorded = LIGHTNING_1_9_DDP[variant]
    assert saved["global_step"] == recorded["global_step"]
    assert_lightning_1_9_weights(saved["state_dict"], variant, atol=1e-6, weights=recorded["weights"])


class WarmUp1x(Net):
    """A single-optimizer 1.x program: each optimizer hook in its optimizer_idx signature."""

    def __init__(self):
        super().__init__()
        self.seen = set()

    def configure_optimizers(self):
        optimizer = sgd(self.parameters())
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=1.0)]

    def optimizer_step(
        self, epoch, batch_idx, optimizer, optimizer_idx, optimizer_closure, on_tpu, using_native_amp, using_lbfgs
    ):
        self.seen.add(("optimizer_step", optimizer_idx, on_tpu, using_native_amp, using_lbfgs))
        optimizer.step(closure=optimizer_closure)
        warm_up(optimizer, self.trainer.global_step)

    def optimizer_zero_grad(self, epoch, batch_idx, optimizer, optimizer_idx):
        self.seen.add(
            ("optimizer_zero_grad", optimizer_idx, optimizer is self.trainer.optimizers[0])
        )  # the user's, as in Lightning
        optimizer.zero_grad()

    def on_before_optimizer_step(self, optimizer, optimizer_idx):
        self.seen.add(("on_before_optimizer_step", optimizer_idx))

    def backward(self, loss, optimizer, optimizer_idx):
        self.seen.add(
            ("backward", optimizer_idx, optimizer is self.trainer.optimizers[0])
        )  # the user's, as in Lightning
        loss.backward()

    def configure_gradient_clipping(self, optimizer, optimizer_idx, gradient_clip_val, gradient_clip_algorithm):
        self.seen.add(("configure_gradient_clipping", optimizer_idx, gradient_clip_val))
        self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def lr_scheduler_step(self, scheduler, optimizer_idx, metric):
        self.seen.add(("lr_scheduler_step", optimizer_idx, metric))
        scheduler.step()


def test_the_1x_optimizer_hook_signatures_get_1x_arguments_and_train_as_plain_torch():
    module = WarmUp1x()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_trainer(max_epochs=2, accumulate_grad_batches=2, gradient_clip_val=CLIP).fit(
            module, DataLoader(random_classification(SAMPLES), batch_size=8)
        )
    assert module.seen == {
        ("optimizer_step", 0, False, False, False),
        ("optimizer_zero_grad", 0, True),
        ("on_before_optimizer_step", 0),
        ("backward", 0, True),
        ("configure_gradient_clipping", 0, CLIP),
        ("lr_scheduler_step", 0, None),
    }
    lines = [str(w.message) for w in caught if "declares optimizer_idx" in str(w.message)]
    hooks = ["optimizer_step", "optimizer_zero_grad", "on_before_optimizer_step", "lr_scheduler_step"]
    hooks += ["configure_gradient_clipping", "backward"]
    assert sorted(line.split(".")[1].split(" ")[0] for line in lines) == sorted(hooks)  # one line each
    reference = torch_reference(batch_size=8, accumulate=2, clip=CLIP)
    for got, want in zip(module.net.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got.detach(), want.detach(), rtol=0, atol=1e-6)


def test_a_1x_callback_and_manual_backward_get_1x_arguments():
    """A callback's on_before_optimizer_step(trainer, module, optimizer, optimizer_idx); the module's
    backward(loss, optimizer, optimizer_idx) from manual_backward gets None, None (as 1.x passed)."""
    seen = []

    class Callback(tm.Callback):
        def on_before_optimizer_step(self, trainer, pl_module, optimizer, optimizer_idx):
            seen.append(("callback", optimizer_idx))

    class Manual(Net):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            optimizer = self.optimizers()
            optimizer.zero_grad()
            self.manual_backward(super().training_step(batch, batch_idx))
            optimizer.step()

        def backward(self, loss, optimizer, optimizer_idx):
            seen.append(("backward", optimizer, optimizer_idx))
            loss.backward()

    quiet_trainer(max_epochs=1, limit_train_batches=1, callbacks=[Callback()]).fit(
        Manual(), DataLoader(random_classification(SAMPLES), batch_size=8)
    )
    assert seen == [("backward", None, None), ("callback", 0)]


class TwoWithIndex(Net):
    def training_step(self, batch, batch_idx, optimizer_idx):
        return super().training_step(batch, batch_idx)

    def configure_optimizers(self):
        return [sgd(self.net[0].parameters()), sgd(self.net[2].parameters())]


def test_optimizer_idx_in_manual_optimization_is_refused_before_training():
    module = TwoWithIndex()
    module.automatic_optimization = False
    trainer = quiet_trainer(max_epochs=1)
    with pytest.raises(ValueError, match="declares optimizer_idx, but TwoWithIndex uses manual optimization"):
        trainer.fit(module, DataLoader(random_classification(SAMPLES), batch_size=8))
    assert trainer.global_step == 0


def test_a_lone_optimizer_runs_training_step_with_its_optimizer_idx_default():
    """Lightning 1.9.5 passed no optimizer_idx with one optimizer: the parameter's default runs."""
    seen = []

    class One(Net):
        def training_step(self, batch, batch_idx, optimizer_idx=None):
            seen.append(optimizer_idx)
            return super().training_step(batch, batch_idx)

        def configure_optimizers(self):
            return sgd(self.parameters())

    module = One()
    quiet_trainer(max_epochs=2, accumulate_grad_batches=2).fit(
        module, DataLoader(random_classification(SAMPLES), batch_size=8)
    )
    assert seen and set(seen) == {None}
    reference = torch_reference(batch_size=8, accumulate=2, warm=False)
    for got, want in zip(module.net.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got.detach(), want.detach(), rtol=0, atol=1e-6)


@pytest.mark.parametrize("framework", ["lightning", "trainmesh"])
@pytest.mark.parametrize("optimizers", [1, 2, "manual"])
def test_optimizer_idx_neither_lightning_runs_is_refused_with_lightning_2s_error(framework, optimizers):
    """A required optimizer_idx with one optimizer (1.9.5: TypeError, 2.x: refused), several optimizers
    without one in automatic optimization, and optimizer_idx in manual optimization (1.9.5 and 2.x refuse):
    Lightning 2.6's RuntimeError and words before training, also a ValueError as 1.9.5 raised it."""
    manual = optimizers == "manual"
    optimizers = 2 if manual else optimizers
    pl = pytest.importorskip("lightning.pytorch") if framework == "lightning" else tm

    class Refused(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 2)

        def training_step(self, batch, batch_idx, *rest):
            return self.layer(batch[0]).sum()

        def configure_optimizers(self):
            return [torch.optim.SGD(self.parameters(), lr=0.1) for _ in range(optimizers)]

    if optimizers == 1 or manual:  # a required optimizer_idx
        Refused.training_step = lambda self, batch, batch_idx, optimizer_idx: self.layer(batch[0]).sum()
        words = "Remove the `optimizer_idx` argument from `training_step`"
    else:
        words = "multiple optimizers is only supported with manual optimization. Set `self.automatic_optimization"
    module = Refused()
    module.automatic_optimization = not manual
    trainer = quiet_trainer(framework=pl, max_epochs=1)
    with pytest.raises(RuntimeError, match=re.escape(words)) as raised:
        trainer.fit(module, DataLoader(TensorDataset(torch.randn(4, 4)), batch_size=2))
    assert trainer.global_step == 0
    assert framework == "lightning" or isinstance(raised.value, ValueError)


def test_a_1x_gan_under_a_strategy_not_checked_against_lightning_1_9_is_refused_before_training():
    module = Gan("plain")
    before = [p.detach().clone() for p in module.parameters()]
    trainer = quiet_trainer(max_epochs=1, strategy="dp")
    with pytest.raises(ValueError, match=r"runs under strategy 'single' or 'ddp'.*not under 'dp'. Use strategy='ddp'"):
        trainer.fit(module, data())
    assert trainer.global_step == 0
    assert all(torch.equal(a, b) for a, b in zip(before, module.parameters()))


def _shape(outputs):
    """Lists as lists, a dict as its keys, a tensor as "T"."""
    if isinstance(outputs, list):
        return [_shape(item) for item in outputs]
    return sorted(outputs) if isinstance(outputs, dict) else "T"


@pytest.mark.parametrize(("variant", "per_batch"), [("plain", [["loss"], ["loss"]]), ("freq", [["loss"]])])
def test_the_batch_and_epoch_end_outputs_have_lightning_1_9s_shape(monkeypatch, variant, per_batch):
    """1.9.5: on_train_batch_end gets one {"loss": ...} per active optimizer; training_epoch_end a list of those."""
    import optimizer_idx_run

    seen = {}

    class Recording(Gan):
        def on_train_batch_end(self, outputs, batch, batch_idx):
            seen.setdefault("batch_end", _shape(outputs))

        def training_epoch_end(self, outputs):
            seen.setdefault("epoch_end", _shape(outputs))

    monkeypatch.setattr(optimizer_idx_run, "Gan", Recording)
    fit(variant)
    assert seen == {"batch_end": per_batch, "epoch_end": [per_batch] * 6}


def test_a_toggle_optimizer_override_in_the_1x_loop_is_refused_before_training():
    class Toggling(Gan):
        def toggle_optimizer(self, optimizer, optimizer_idx):
            raise AssertionError("not called")

    trainer = quiet_trainer(max_epochs=1)
    with pytest.raises(ValueError, match="Toggling overrides toggle_optimizer.*manual optimization"):
        trainer.fit(Toggling("plain"), data())
    assert trainer.global_step == 0
