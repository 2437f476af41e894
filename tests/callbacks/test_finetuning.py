"""BaseFinetuning and BackboneFinetuning (callbacks/finetuning.py) against Lightning 2.6's: the same
transfer-learning program (a backbone with a batch norm and a head, Adam over the trainable
parameters, a StepLR) run under Lightning and under trainmesh with the same seed, with
BackboneFinetuning(unfreeze_backbone_at_epoch=1) and with a BaseFinetuning subclass that unfreezes
part of the backbone at epoch 2: the trained weights are bit-identical, the optimizer's param
groups (their sizes and learning rates) are the same at every epoch's start and after fit, and so are the
callback's checkpoint state; a resumed fit rebuilds the param groups as Lightning's does and ends
with Lightning's weights (Trainer(exact_resume=True): with the weights of the fit that never stopped)."""

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from trainmesh.callbacks import BackboneFinetuning, BaseFinetuning

pl = pytest.importorskip("lightning.pytorch")
from lightning.pytorch.callbacks import BackboneFinetuning as PlBackboneFinetuning  # noqa: E402
from lightning.pytorch.callbacks import BaseFinetuning as PlBaseFinetuning  # noqa: E402


def make_module(base):
    class Transfer(base):
        def __init__(self):
            super().__init__()
            self.backbone = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU())
            self.head = nn.Linear(16, 3)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return F.cross_entropy(self.head(self.backbone(x)), y)

        def configure_optimizers(self):
            optimizer = torch.optim.Adam(filter(lambda p: p.requires_grad, self.parameters()), lr=0.01)
            return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)]

    return Transfer


def make_partial(base):
    class UnfreezeFirstLayer(base):
        """Freezes the backbone's first layer (its batch norm stays trainable), unfreezes it at epoch 2."""

        def freeze_before_training(self, pl_module):
            self.freeze(pl_module.backbone[:2], train_bn=True)

        def finetune_function(self, pl_module, epoch, optimizer):
            if epoch == 2:
                self.unfreeze_and_add_param_group(pl_module.backbone[:2], optimizer, initial_denom_lr=5.0)

    return UnfreezeFirstLayer


def make_recorder(base):
    class Groups(base):
        def __init__(self):
            self.epochs = []

        # At each epoch's start, after the finetuning callback's (listed first), and at the end of
        # fit. (Not at on_train_epoch_end: Lightning steps epoch-interval schedulers at the epoch's
        # last batch, trainmesh after the non-monitoring on_train_epoch_end hooks.)
        def on_train_epoch_start(self, trainer, pl_module):
            groups = trainer.optimizers[0].param_groups
            self.epochs.append([(len(g["params"]), g["lr"]) for g in groups])

        on_fit_end = on_train_epoch_start

    return Groups


def data():
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(32, 8, generator=g), torch.randint(0, 3, (32,), generator=g)
    return DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True)


def run(framework, which, root, *, max_epochs=4, ckpt_path=None, save=None, exact=False):
    base_module, base_callback, trainer_class, finetuning = framework
    finetuning_callback = finetuning[which]
    pl.seed_everything(7) if trainer_class is pl.Trainer else tm.seed_everything(7)
    model = make_module(base_module)()
    recorder = make_recorder(base_callback)()
    own = {"exact_resume": True} if exact else {}  # trainmesh's own argument
    trainer = trainer_class(
        **own,
        max_epochs=max_epochs,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        default_root_dir=root,
        callbacks=[finetuning_callback, recorder],
    )
    trainer.fit(model, data(), ckpt_path=ckpt_path)
    if save is not None:
        trainer.save_checkpoint(save)
    return model.state_dict(), recorder.epochs, finetuning_callback.state_dict()


def frameworks():
    lightning = (
        pl.LightningModule,
        pl.Callback,
        pl.Trainer,
        {"backbone": PlBackboneFinetuning(unfreeze_backbone_at_epoch=1), "partial": make_partial(PlBaseFinetuning)()},
    )
    ours = (
        tm.LightningModule,
        tm.Callback,
        tm.Trainer,
        {"backbone": BackboneFinetuning(unfreeze_backbone_at_epoch=1), "partial": make_partial(BaseFinetuning)()},
    )
    return lightning, ours


def assert_same_weights(ours, theirs):
    assert ours.keys() == theirs.keys()
    for name in ours:
        assert torch.equal(ours[name], theirs[name]), name


@pytest.mark.parametrize("which", ["backbone", "partial"])
def test_finetuning_trains_as_lightning(tmp_path, which):
    lightning, ours = frameworks()
    their_weights, their_groups, their_state = run(lightning, which, str(tmp_path / "pl"))
    our_weights, our_groups, our_state = run(ours, which, str(tmp_path / "tm"))
    assert our_groups == their_groups
    assert len(our_groups[-1]) == 2  # a group was added: the test measures something
    assert our_state == their_state
    assert_same_weights(our_weights, their_weights)


def test_resumed_finetuning_is_lightnings(tmp_path):
    """A fit stopped after epoch 2 (the backbone's group added) and resumed to epoch 4: the param
    groups are rebuilt from the callback's state before the optimizer's state loads."""
    out = {}
    for name, framework in zip(["pl", "tm"], frameworks()):
        path = str(tmp_path / f"{name}.ckpt")
        run(framework, "backbone", str(tmp_path / name), max_epochs=2, save=path)
        resumed = (*framework[:3], {"backbone": type(framework[3]["backbone"])(unfreeze_backbone_at_epoch=1)})
        out[name] = run(resumed, "backbone", str(tmp_path / name), max_epochs=4, ckpt_path=path, exact=name == "tm")
    assert out["tm"][1] == out["pl"][1] and len(out["tm"][1][-1]) == 2
    assert out["tm"][2] == out["pl"][2]
    # The weights against the run that never stopped: with Trainer(exact_resume=True) trainmesh resumes
    # exactly (the checkpoint holds the generators, so the shuffled order goes on); Lightning's resume
    # (trainmesh's without it) continues from this run's seed instead.
    whole = run(frameworks()[1], "backbone", str(tmp_path / "whole"), max_epochs=4)
    assert_same_weights(out["tm"][0], whole[0])
    # The resume the program names (no exact_resume) is Lightning's: the rebuilt groups stay frozen, as
    # freeze_before_training left them, so the backbone does not move (before: it trained, 14.8563 vs
    # Lightning's 14.7595 parameter sum at epoch 3's start)
    ours = frameworks()[1]
    resumed = (*ours[:3], {"backbone": BackboneFinetuning(unfreeze_backbone_at_epoch=1)})
    named = run(resumed, "backbone", str(tmp_path / "tm"), max_epochs=4, ckpt_path=str(tmp_path / "tm.ckpt"))
    assert named[1] == out["pl"][1] and named[2] == out["pl"][2]
    assert_same_weights(named[0], out["pl"][0])


@pytest.mark.parametrize(("world_size", "shards"), [(2, False), (1, True)])
def test_refused_where_parameters_are_synchronized_or_sharded(world_size, shards):
    trainer = SimpleNamespace(
        world_size=world_size, runtime=SimpleNamespace(capabilities=SimpleNamespace(shards_parameters=shards))
    )
    with pytest.raises(ValueError, match="drift apart. Finetune on one process"):
        BackboneFinetuning().setup(trainer, make_module(tm.Module)(), "fit")


def test_backbone_required():
    class NoBackbone(tm.Module):
        pass

    with pytest.raises(ValueError, match="no nn.Module `backbone`"):
        BackboneFinetuning().on_fit_start(SimpleNamespace(optimizers=[]), NoBackbone())
