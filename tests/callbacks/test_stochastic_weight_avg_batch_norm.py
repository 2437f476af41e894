"""StochasticWeightAveraging on a model with batch norm, against Lightning 2.6's: the fit gets one
more epoch, forward only (trainer.fit_loop._skip_backward), that recomputes the running statistics
for the averaged weights. The same program under both, with the same seed: the final weights and
batch-norm buffers bit-identical, the hooks that fire in that epoch and what they read
(current_epoch, max_epochs, global_step, num_training_batches, accumulate_grad_batches), the
optimizer step at its last batch, current_epoch/global_step/max_epochs after fit, the logged
metrics, the checkpoints ModelCheckpoint writes beside EarlyStopping and the SWA state they hold;
under each ``swa_epoch_start`` form, annealing strategy, ``device=None``, batch norm inside a
submodule and a fit without validation (the step at that epoch's end then meets the last
gradients), and resumed from the checkpoints written during the averaging epochs."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm

pl = pytest.importorskip("lightning.pytorch")


class Block(nn.Module):
    """A submodule holding the batch norm (``bn_inside``)."""

    def __init__(self):
        super().__init__()
        self.linear, self.norm = nn.Linear(4, 8), nn.BatchNorm1d(8)

    def forward(self, x):
        return torch.relu(self.norm(self.linear(x)))


def make_module(base, calls, *, nested=False):
    class Net(base):
        def __init__(self):
            super().__init__()
            if nested:
                self.net = nn.Sequential(Block(), nn.Linear(8, 1))
            else:
                self.net = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))

        def _note(self, hook, *extra):
            t = self.trainer
            calls.append((hook, t.current_epoch, t.global_step, t.max_epochs, *extra))

        def training_step(self, batch, batch_idx):
            t = self.trainer
            self._note("training_step", batch_idx, t.num_training_batches, t.accumulate_grad_batches, self.training)
            loss = F.mse_loss(self.net(batch[0]), batch[1])
            self.log("train_loss", loss, on_epoch=True)
            return loss

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", F.mse_loss(self.net(batch[0]), batch[1]))

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
            return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)]

        def optimizer_step(self, epoch, batch_idx, optimizer, closure):
            self._note("optimizer_step", batch_idx, optimizer.param_groups[0]["lr"])
            return super().optimizer_step(epoch, batch_idx, optimizer, closure)

        def on_before_zero_grad(self, optimizer):
            self._note("on_before_zero_grad")

        def on_before_backward(self, loss):
            self._note("on_before_backward")

        def on_before_optimizer_step(self, optimizer):
            self._note("on_before_optimizer_step")

        def on_train_batch_end(self, outputs, batch, batch_idx):
            self._note("on_train_batch_end", batch_idx, outputs["loss"].item())

        def on_train_epoch_start(self):
            self._note("on_train_epoch_start")

        def on_train_epoch_end(self):
            self._note("on_train_epoch_end")

        def on_validation_start(self):
            self._note("on_validation_start")

        def on_train_end(self):
            self._note("on_train_end")

    return Net


def data(shuffle):
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(24, 4, generator=g), torch.randn(24, 1, generator=g)
    return DataLoader(TensorDataset(x, y), batch_size=4, shuffle=shuffle), DataLoader(TensorDataset(x, y), batch_size=8)


def run(lightning, root, swa_kwargs, *, nested=False, validate=True, resume=None, shuffle=True):
    lib = pl if lightning else tm
    from_callbacks = lib.callbacks
    lib.seed_everything(2)
    calls = []
    model = make_module(lib.LightningModule, calls, nested=nested)()
    swa = from_callbacks.StochasticWeightAveraging(**swa_kwargs)
    callbacks = [swa]
    if validate:
        callbacks += [
            from_callbacks.EarlyStopping(monitor="val_loss", patience=3),
            from_callbacks.ModelCheckpoint(monitor="val_loss", save_top_k=2, save_last=True),
        ]
    else:
        callbacks.append(from_callbacks.ModelCheckpoint(save_top_k=-1))
    trainer = lib.Trainer(
        max_epochs=4,
        accelerator="cpu",
        devices=1,
        logger=lib.loggers.CSVLogger(str(root)),
        log_every_n_steps=2,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(root),
        callbacks=callbacks,
    )
    train, val = data(shuffle)
    trainer.fit(model, train, val if validate else None, ckpt_path=resume)
    checkpoints = sorted(p.name for p in (root / "lightning_logs" / "version_0" / "checkpoints").glob("*.ckpt"))
    if resume is not None:
        checkpoints = []  # the resumed run's directory is another version's
    return {
        "weights": model.state_dict(),
        "calls": calls,
        "end": (trainer.current_epoch, trainer.global_step, trainer.max_epochs, trainer.fit_loop.max_epochs),
        "logged": {k: float(v) for k, v in trainer.logged_metrics.items()},
        "checkpoints": checkpoints,
        "swa": swa.state_dict(),
        "momentum": [m.momentum for m in model.modules() if isinstance(m, nn.BatchNorm1d)],
        "dir": root / "lightning_logs" / "version_0" / "checkpoints",
    }


def assert_same(theirs, ours, *, calls=True):
    for name, value in theirs["weights"].items():
        assert torch.equal(ours["weights"][name], value), name
    if calls:
        assert ours["calls"] == theirs["calls"]
    assert ours["end"] == theirs["end"]
    assert ours["logged"] == theirs["logged"]
    assert ours["checkpoints"] == theirs["checkpoints"]
    assert ours["momentum"] == theirs["momentum"] == [0.1]
    their_swa, our_swa = theirs["swa"], ours["swa"]
    assert our_swa["n_averaged"] == their_swa["n_averaged"]
    assert our_swa["latest_update_epoch"] == their_swa["latest_update_epoch"]
    assert our_swa["scheduler_state"] == their_swa["scheduler_state"]
    for name, value in their_swa["average_model_state"].items():
        assert torch.equal(our_swa["average_model_state"][name], value), name


def swa_state_of(path):
    checkpoint = torch.load(path, weights_only=False)
    (state,) = [v for k, v in checkpoint["callbacks"].items() if k.startswith("StochasticWeightAveraging")]
    return checkpoint["epoch"], checkpoint["global_step"], checkpoint["state_dict"], state


COS = {"swa_lrs": 0.05, "swa_epoch_start": 2, "annealing_epochs": 2}


def test_batch_norm_epoch_as_lightnings(tmp_path):
    theirs, ours = run(True, tmp_path / "pl", COS), run(False, tmp_path / "tm", COS)
    assert_same(theirs, ours)
    # the forward-only epoch (4): six training steps, no zero_grad or backward, one optimizer step at its end
    extra = [c for c in ours["calls"] if c[1] == 4]
    assert [c[0] for c in extra].count("training_step") == 6
    assert not {"on_before_zero_grad", "on_before_backward"} & {c[0] for c in extra}
    assert [c[:5] for c in extra if c[0] == "optimizer_step"] == [("optimizer_step", 4, 24, 5, 5)]
    assert ("training_step", 4, 24, 5, 0, 7, 7, True) in extra  # num_training_batches and the window: 7
    assert ours["end"] == (5, 25, 4, 4)
    assert ours["weights"]["net.1.num_batches_tracked"] == 6
    assert ours["checkpoints"] == ["epoch=2-step=18.ckpt", "epoch=4-step=25.ckpt", "last.ckpt"]
    for name in ours["checkpoints"]:
        their_epoch, their_step, their_weights, their_state = swa_state_of(theirs["dir"] / name)
        our_epoch, our_step, our_weights, our_state = swa_state_of(ours["dir"] / name)
        assert (our_epoch, our_step) == (their_epoch, their_step)
        for key, value in their_weights.items():
            assert torch.equal(our_weights[key], value), (name, key)
        assert our_state["n_averaged"] == their_state["n_averaged"]
        assert our_state["scheduler_state"] == their_state["scheduler_state"]
        assert our_state["latest_update_epoch"] == their_state["latest_update_epoch"]


CASES = {
    "fraction_linear": ({"swa_lrs": [0.02], "swa_epoch_start": 0.5, "annealing_strategy": "linear"}, {}),
    "device_none": ({**COS, "device": None}, {}),
    "bn_inside": (COS, {"nested": True}),
    # no validation: no zero_grad before the forward-only epoch, so its one optimizer step uses the last gradients
    "no_validation": ({"swa_lrs": 0.05, "swa_epoch_start": 3, "annealing_epochs": 1}, {"validate": False}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_batch_norm_epoch_variants_as_lightnings(tmp_path, case):
    swa_kwargs, options = CASES[case]
    assert_same(run(True, tmp_path / "pl", swa_kwargs, **options), run(False, tmp_path / "tm", swa_kwargs, **options))


def test_resumed_from_averaging_epochs_as_lightnings(tmp_path):
    """Each checkpoint written from the averaging's start on (epochs 1-3, and the batch-norm epoch's own),
    resumed by both (a loader in order: trainmesh's resume restores the checkpoint's generators,
    Lightning's does not). Past swa_end Lightning's resumed fit does not make its SWA scheduler again,
    so the step of a batch-norm epoch resumed into runs without one; the same here."""
    kwargs = {"swa_lrs": 0.05, "swa_epoch_start": 2, "annealing_epochs": 2, "annealing_strategy": "linear"}
    first = {side: run(side == "pl", tmp_path / side, kwargs, validate=False, shuffle=False) for side in ("pl", "tm")}
    names = first["tm"]["checkpoints"]
    steps = [(0, 6), (1, 12), (2, 18), (3, 24), (4, 25)]
    assert names == first["pl"]["checkpoints"] == [f"epoch={e}-step={s}.ckpt" for e, s in steps]
    for name in names[1:]:
        resumed = {
            side: run(
                side == "pl",
                tmp_path / f"{side}-{name}",
                kwargs,
                validate=False,
                shuffle=False,
                resume=first[side]["dir"] / name,
            )
            for side in ("pl", "tm")
        }
        assert_same(resumed["pl"], resumed["tm"])


class Stream(torch.utils.data.IterableDataset):
    """Batches without a length: the batch-norm epoch cannot hold its step for the last one."""

    def __iter__(self):
        g = torch.Generator().manual_seed(0)
        return iter([(torch.randn(4, 4, generator=g), torch.randn(4, 1, generator=g)) for _ in range(3)])


def test_loader_without_length_stops_before_training(tmp_path):
    """Lightning 2.6.6 trains every epoch and stops as the batch-norm epoch starts (an assertion);
    trainmesh stops at on_train_start, before a training step, saying what to do."""
    results = {}
    for lib in (pl, tm):
        calls = []
        model = make_module(lib.LightningModule, calls)()
        swa = lib.callbacks.StochasticWeightAveraging(swa_lrs=0.05, swa_epoch_start=1)
        trainer = lib.Trainer(
            max_epochs=2,
            accelerator="cpu",
            devices=1,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_checkpointing=False,
            default_root_dir=str(tmp_path),
            callbacks=[swa],
        )
        with pytest.raises((AssertionError, ValueError)) as raised:
            trainer.fit(model, DataLoader(Stream(), batch_size=None))
        results[lib] = (raised, [c for c in calls if c[0] == "training_step"])
    raised, steps = results[pl]
    assert "Iterable-style datasets are not supported" in str(raised.value) and len(steps) == 6
    raised, steps = results[tm]
    assert raised.type is ValueError and "needs a train loader with a length" in str(raised.value)
    assert steps == []
