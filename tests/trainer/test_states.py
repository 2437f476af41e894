"""Lightning's ``trainer.state`` and its flags (trainer/states.py): one program run under Lightning
2.6 and under trainmesh, a callback and the module recording ``state.fn``, ``state.stage``,
``state.status`` and ``training`` / ``validating`` / ``testing`` / ``predicting`` /
``sanity_checking`` / ``evaluating`` in every hook (fit with the sanity check and validation
inside the epoch and at its end, validate, test, predict, a failing fit): the two recordings must
be the same, hook by hook."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm

pl = pytest.importorskip("lightning.pytorch")

HOOKS = """
    setup teardown on_fit_start on_fit_end on_sanity_check_start on_sanity_check_end
    on_train_start on_train_end on_train_epoch_start on_train_epoch_end on_train_batch_start on_train_batch_end
    on_validation_start on_validation_end on_validation_epoch_start on_validation_epoch_end
    on_validation_batch_start on_validation_batch_end on_test_start on_test_end on_test_epoch_start
    on_test_epoch_end on_test_batch_start on_test_batch_end on_predict_start on_predict_end
    on_predict_epoch_start on_predict_epoch_end on_predict_batch_start on_predict_batch_end
    on_before_backward on_after_backward on_before_optimizer_step on_exception
""".split()


def flags(trainer):
    state = trainer.state
    value = lambda e: None if e is None else e.value  # noqa: E731
    return (
        value(state.fn),
        value(state.stage),
        state.status.value,
        trainer.training,
        trainer.validating,
        trainer.testing,
        trainer.predicting,
        trainer.sanity_checking,
        trainer.evaluating,
    )


def _hook(name):
    def hook(self, trainer, *args, **kwargs):
        self.calls.append((name, flags(trainer)))

    return hook


def program(base_module, base_callback, trainer_class, root):
    """Each stage's recording (the callback's hooks, the module's steps) and the state after it."""
    calls = []

    class Recorder(base_callback):
        pass

    Recorder.calls = calls
    for name in HOOKS:
        setattr(Recorder, name, _hook(name))

    class Net(base_module):
        fail = False

        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 2)

        def training_step(self, batch, batch_idx):
            calls.append(("training_step", flags(self.trainer)))
            if self.fail:
                raise RuntimeError("boom")
            return F.cross_entropy(self.layer(batch[0]), batch[1])

        def validation_step(self, batch, batch_idx):
            calls.append(("validation_step", flags(self.trainer)))

        def test_step(self, batch, batch_idx):
            calls.append(("test_step", flags(self.trainer)))

        def predict_step(self, batch, batch_idx):
            calls.append(("predict_step", flags(self.trainer)))
            return self.layer(batch[0])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    g = torch.Generator().manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(8, 4, generator=g), torch.randint(0, 2, (8,), generator=g)), 2)

    def make():
        return trainer_class(
            max_epochs=2,
            num_sanity_val_steps=1,
            limit_val_batches=1,
            val_check_interval=2,  # validation inside the epoch (after batch 2) and at its end
            accelerator="cpu",
            devices=1,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_checkpointing=False,
            default_root_dir=root,
            callbacks=[Recorder()],
        )

    out = {}
    trainer = make()
    out["init"] = [("init", flags(trainer))]
    model = Net()
    for stage, run in [
        ("fit", lambda: trainer.fit(model, data, data)),
        ("validate", lambda: trainer.validate(model, data, verbose=False)),
        ("test", lambda: trainer.test(model, data, verbose=False)),
        ("predict", lambda: trainer.predict(model, data)),
    ]:
        run()
        out[stage] = calls[:] + [("after", flags(trainer))]
        calls.clear()
    failing, trainer = Net(), make()
    failing.fail = True
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(failing, data, data)
    out["failed fit"] = calls[:] + [("after", flags(trainer))]
    return out


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    root = tmp_path_factory.mktemp("states")
    lightning = program(pl.LightningModule, pl.Callback, pl.Trainer, str(root / "pl"))
    ours = program(tm.LightningModule, tm.Callback, tm.Trainer, str(root / "tm"))
    return lightning, ours


@pytest.mark.parametrize("stage", ["init", "fit", "validate", "test", "predict", "failed fit"])
def test_flags_in_every_hook_are_lightnings(recordings, stage):
    lightning, ours = recordings
    assert len(lightning[stage]) > 1 or stage == "init"
    assert by_hook(ours[stage]) == by_hook(lightning[stage])


def by_hook(calls):
    """Each hook's flags, in the order of its calls. (Not one sequence across hooks: trainmesh
    validates inside an epoch before that batch's on_train_batch_end, Lightning after it, an
    order outside what this test measures.)"""
    out = {}
    for hook, seen in calls:
        out.setdefault(hook, []).append(seen)
    return out


@pytest.mark.parametrize("name", ["training", "validating", "testing", "predicting", "sanity_checking"])
def test_setting_a_flag_is_lightnings(tmp_path, name):
    """Setting True enters the stage; setting False leaves it only where it is the current one."""

    def sequence(trainer):
        seen = []
        for flag, value in [(name, True), ("training" if name != "training" else "testing", False), (name, False)]:
            setattr(trainer, flag, value)
            seen.append(flags(trainer))
        return seen

    settings = dict(logger=False, enable_progress_bar=False, default_root_dir=str(tmp_path))
    assert sequence(tm.Trainer(**settings)) == sequence(pl.Trainer(**settings))


def test_state_names():
    from trainmesh.trainer.states import RunningStage, TrainerFn, TrainerStatus

    for ours, theirs in [
        (RunningStage, pl.trainer.states.RunningStage),
        (TrainerFn, pl.trainer.states.TrainerFn),
        (TrainerStatus, pl.trainer.states.TrainerStatus),
    ]:
        assert [(e.name, e.value) for e in ours] == [(e.name, e.value) for e in theirs]
    assert RunningStage.TRAINING == "TRAIN" and TrainerStatus.FINISHED.stopped
    assert RunningStage.SANITY_CHECKING.evaluating and RunningStage.SANITY_CHECKING.dataloader_prefix == "val"


def _stage_program(root, trainer_class, module_class, datamodule_class, callback_class):
    """setup/teardown of the module, a callback and a data module in fit, validate, test and predict:
    what each is handed, as a program prints it (repr, str, == the stage's name)."""
    seen = []

    def record_hook(owner, name):
        def hook(self, *args, stage=None):
            seen.append((owner, name, repr(stage), f"{stage}", stage == stage.value, type(stage).__name__))

        return hook

    class Data(datamodule_class):
        def train_dataloader(self):
            return DataLoader(TensorDataset(torch.randn(4, 2), torch.randn(4, 1)), batch_size=2)

        val_dataloader = test_dataloader = predict_dataloader = train_dataloader
        setup, teardown = record_hook("datamodule", "setup"), record_hook("datamodule", "teardown")

    class Model(module_class):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return F.mse_loss(self.layer(batch[0]), batch[1])

        def validation_step(self, batch, batch_idx):
            return None

        test_step = validation_step

        def predict_step(self, batch, batch_idx):
            return self.layer(batch[0])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        setup, teardown = record_hook("module", "setup"), record_hook("module", "teardown")

    class Recorder(callback_class):
        setup, teardown = record_hook("callback", "setup"), record_hook("callback", "teardown")

    quiet = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer = trainer_class(max_steps=1, accelerator="cpu", callbacks=[Recorder()], **quiet)
    model, data = Model(), Data()
    trainer.fit(model, datamodule=data)
    trainer.validate(model, datamodule=data, verbose=False)
    trainer.test(model, datamodule=data, verbose=False)
    trainer.predict(model, datamodule=data)
    return seen


def test_setup_and_teardown_get_lightning_s_trainer_fn():
    """Lightning (2.6, and 1.9.5 alike) hands setup/teardown a ``TrainerFn``: ``f"{stage}"`` is
    "TrainerFn.FITTING", not "fit" (a program naming files or printing by it sees it); it still equals
    "fit". Before: trainmesh handed the str."""
    theirs = _stage_program(pl, pl.Trainer, pl.LightningModule, pl.LightningDataModule, pl.Callback)
    ours = _stage_program(tm, tm.Trainer, tm.Module, tm.DataModule, tm.Callback)
    assert ours == theirs
    assert ("module", "setup", "<TrainerFn.FITTING: 'fit'>", "TrainerFn.FITTING", True, "TrainerFn") in ours
