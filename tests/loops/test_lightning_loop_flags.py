"""Lightning 2.6's loop behaviour from its own tests (tests_pytorch/trainer/flags, loops/), the same
small program run under Lightning and trainmesh and compared as data: a step hook set to None or
replaced on the instance, on_train_batch_start returning -1, the grad mode of the evaluation
hooks, and the val_check_interval misconfigurations Lightning refuses."""

import pytest
import torch

import trainmesh as tm
from trainmesh.demos.boring_classes import BoringModel as TmBoringModel
from trainmesh.utilities.exceptions import MisconfigurationException as TmMisconfiguration

pl = pytest.importorskip("lightning.pytorch")
from lightning.pytorch.demos.boring_classes import BoringModel as PlBoringModel  # noqa: E402
from lightning.pytorch.utilities.exceptions import MisconfigurationException as PlMisconfiguration  # noqa: E402

FRAMEWORKS = {"lightning": (pl.Trainer, PlBoringModel), "trainmesh": (tm.Trainer, TmBoringModel)}
QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)


def both(program, *args):
    """``program(Trainer, BoringModel, *args)`` under each framework: (Lightning's, trainmesh's)."""
    return tuple(program(*FRAMEWORKS[name], *args) for name in ("lightning", "trainmesh"))


def step_hooks_on_the_instance(Trainer, BoringModel, root):
    model = BoringModel()
    model.validation_step = None  # Lightning's tests turn validation off so (test_overfit_batches.py)
    asked = []
    model.val_dataloader = lambda: asked.append("val") or BoringModel().val_dataloader()
    trainer = Trainer(max_epochs=1, limit_train_batches=2, default_root_dir=root, **QUIET)
    trainer.fit(model)
    steps = []
    model.test_step = lambda batch, batch_idx: steps.append(batch_idx)  # replaced on the instance: called
    trainer.test(model, verbose=False)
    return trainer.num_val_batches, asked, trainer.num_training_batches, steps[:3], len(steps)


def test_a_step_hook_set_on_the_instance(tmp_path):
    theirs, ours = both(step_hooks_on_the_instance, tmp_path)
    assert ours == theirs
    assert theirs == ([], [], 2, [0, 1, 2], 64)


def ends_epochs_early(Trainer, BoringModel, root, interval):
    seen = []

    class Model(BoringModel):
        def on_train_batch_start(self, batch, batch_idx):
            return -1 if batch_idx == 3 else None

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": interval}}

        def on_train_batch_end(self, *args):
            seen.append(("batch_end", self.trainer.global_step))

        def on_validation_start(self):
            seen.append(("validation", self.trainer.global_step))

        def on_train_epoch_end(self):
            lr = self.trainer.optimizers[0].param_groups[0]["lr"]
            seen.append(("epoch_end", self.trainer.global_step, self.trainer.is_last_batch, lr))

    trainer = Trainer(
        max_epochs=2, limit_train_batches=6, limit_val_batches=1, val_check_interval=2, num_sanity_val_steps=0,
        default_root_dir=root, **QUIET,
    )  # fmt: skip
    trainer.fit(Model())
    progress = trainer.fit_loop.epoch_loop.batch_progress.total
    return seen, trainer.global_step, trainer.is_last_batch, (progress.ready, progress.started, progress.processed)


@pytest.mark.parametrize("interval", ["epoch", "step"])
def test_on_train_batch_start_minus_one_ends_the_epoch_as_lightnings(tmp_path, interval):
    """The batch is the epoch's last (is_last_batch, processed, not trained); the schedulers step as
    at an epoch's end (the step-interval ones too); no validation after it."""
    theirs, ours = both(ends_epochs_early, tmp_path, interval)
    assert ours == theirs
    assert theirs[0][4][3] == (0.05 if interval == "epoch" else 0.00625)  # 0.1 halved once, or 4 times


def grad_mode_in_hooks(Trainer, BoringModel, root):
    seen = {}

    class Model(BoringModel):
        def record(self, hook):
            seen[(self.trainer.state.fn, hook)] = (torch.is_grad_enabled(), torch.is_inference_mode_enabled())

    for hook in ("on_validation_model_eval", "on_validation_start", "on_validation_end", "on_test_start",
                 "on_test_end", "on_predict_start", "on_predict_end"):  # fmt: skip
        setattr(Model, hook, lambda self, hook=hook: self.record(hook))
    model = Model()
    trainer = Trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=1, default_root_dir=root, **QUIET)
    trainer.fit(model)
    for inference in (True, False):
        trainer = Trainer(inference_mode=inference, limit_test_batches=1, limit_predict_batches=1, **QUIET)
        trainer.validate(model, verbose=False)
        trainer.test(model, verbose=False)
        trainer.predict(model)
    return {(str(fn), hook): mode for (fn, hook), mode in seen.items()}


def test_evaluation_hooks_run_without_grad(tmp_path):
    theirs, ours = both(grad_mode_in_hooks, tmp_path)
    assert ours == theirs
    assert not any(grad for grad, _ in theirs.values())


def misconfigured(Trainer, BoringModel, root):
    found = []
    try:
        Trainer(val_check_interval=0.5, check_val_every_n_epoch=None)
    except (PlMisconfiguration, TmMisconfiguration) as error:
        found.append(type(error).__name__)
    trainer = Trainer(limit_train_batches=10, val_check_interval=100, default_root_dir=root, **QUIET)
    try:
        trainer.fit(BoringModel())
    except ValueError as error:
        found.append(("ValueError", "less than or equal to the number of the training batches" in str(error)))
    # fine: validation off, or counted across epochs
    for extra in (dict(limit_val_batches=0), dict(check_val_every_n_epoch=None, max_steps=3)):
        trainer = Trainer(
            limit_train_batches=2, val_check_interval=3, max_epochs=2, default_root_dir=root, **QUIET, **extra
        )
        trainer.fit(BoringModel())
        found.append(trainer.global_step)
    return found


def test_val_check_interval_misconfigurations(tmp_path):
    theirs, ours = both(misconfigured, tmp_path)
    assert ours == theirs
    assert theirs == ["MisconfigurationException", ("ValueError", True), 4, 3]


def fast_dev_run_loggers(Trainer, BoringModel, root, logger_kind):
    from lightning.pytorch.loggers import CSVLogger as PlCSV

    from trainmesh.loggers import CSVLogger as TmCSV

    drawn = []

    class Model(BoringModel):
        def training_step(self, batch, batch_idx):
            self.logger.experiment.add_histogram("weights", self.layer.weight)  # a no-op under fast_dev_run
            drawn.append(self.logger.experiment.log_anything(batch_idx))
            return super().training_step(batch, batch_idx)

    csv = (PlCSV if Trainer is pl.Trainer else TmCSV)(root / "csv")
    logger = {"csv": csv, "default": True, "none": False}[logger_kind]
    trainer = Trainer(fast_dev_run=2, logger=logger, default_root_dir=root, enable_progress_bar=False)
    model = Model() if logger_kind != "none" else BoringModel()
    trainer.fit(model)
    written = sorted(str(path.relative_to(root)) for path in root.rglob("*") if path.is_file())
    return type(trainer.logger).__name__, len(trainer.loggers), drawn, written


@pytest.mark.parametrize("logger_kind", ["csv", "default", "none"])
def test_fast_dev_run_swaps_the_loggers_for_a_dummy(tmp_path, logger_kind):
    theirs = fast_dev_run_loggers(*FRAMEWORKS["lightning"], tmp_path / "pl", logger_kind)
    ours = fast_dev_run_loggers(*FRAMEWORKS["trainmesh"], tmp_path / "tm", logger_kind)
    assert ours == theirs
    assert theirs[:3] == {"none": ("NoneType", 0, []), "csv": ("DummyLogger", 1, [None, None])}.get(
        logger_kind, ("DummyLogger", 1, [None, None])
    )


def sampler_epochs_and_kept_predictions(Trainer, BoringModel, root):
    from unittest.mock import Mock

    from torch.utils.data import BatchSampler, DataLoader, RandomSampler

    def loader(batch_sampler):
        dataset = BoringModel().train_dataloader().dataset
        sampler = RandomSampler(dataset)
        sampler.set_epoch = Mock()
        if batch_sampler:
            return DataLoader(dataset, batch_sampler=BatchSampler(sampler, 2, True)), sampler
        return DataLoader(dataset, sampler=sampler), sampler

    class Model(BoringModel):
        def predict_step(self, batch, batch_idx):
            return batch_idx

    epochs = []
    for batch_sampler in (False, True):
        trainer = Trainer(max_epochs=2, limit_train_batches=1, limit_val_batches=1, default_root_dir=root, **QUIET)
        (train, train_sampler), (val, val_sampler) = loader(batch_sampler), loader(batch_sampler)
        trainer.fit(Model(), train, val)
        test, test_sampler = loader(batch_sampler)
        trainer.test(Model(), test, verbose=False)
        epochs.append([[c.args for c in s.set_epoch.mock_calls] for s in (train_sampler, val_sampler, test_sampler)])
    trainer = Trainer(limit_predict_batches=2, **QUIET)
    returned = trainer.predict(Model(), return_predictions=True)
    kept = list(trainer.predict_loop.predictions)
    trainer = Trainer(limit_predict_batches=2, **QUIET)
    none = trainer.predict(Model(), return_predictions=False)
    return epochs, returned, kept, none, list(trainer.predict_loop.predictions)


def test_evaluation_samplers_get_the_epoch_and_return_predictions_false_keeps_none(tmp_path):
    theirs, ours = both(sampler_epochs_and_kept_predictions, tmp_path)
    assert ours == theirs
    assert theirs[0][0] == [[(0,), (1,)], [(0,), (0,), (1,)], [(2,)]]  # validation: sanity check, epochs 0, 1
    assert theirs[1:] == ([0, 1], [0, 1], None, [])


@pytest.mark.parametrize("stage", ["fit", "validate", "test", "predict"])
def test_a_step_reading_dataloader_iter_is_refused_before_anything_runs(tmp_path, stage):
    """Lightning 2's ``training_step(self, dataloader_iter)`` fetches its own batches; trainmesh's loops
    give every step one batch, so such a module is refused before any hook runs (it failed inside
    the first step with "'Tensor' object is not an iterator")."""
    step = {"fit": "training_step", "validate": "validation_step", "test": "test_step", "predict": "predict_step"}
    calls = []

    class Model(TmBoringModel):
        def setup(self, stage):
            calls.append(stage)

    def reads_its_batches(self, dataloader_iter):
        return self.step(next(dataloader_iter)[0])

    setattr(Model, step[stage], reads_its_batches)
    trainer = tm.Trainer(default_root_dir=tmp_path, max_epochs=1, **QUIET)
    with pytest.raises(TmMisconfiguration, match=f"{step[stage]}\\(\\) takes dataloader_iter"):
        getattr(trainer, stage)(Model())
    assert calls == []


def limits_as_lightning_reads_them(Trainer, BoringModel, root):
    validations = []

    class Model(BoringModel):
        def on_validation_start(self):
            validations.append(self.trainer.global_step)

    found = []
    trainer = Trainer(
        limit_train_batches=4.0, limit_val_batches=2.0, val_check_interval=2.0, max_epochs=1, num_sanity_val_steps=0,
        default_root_dir=root, **QUIET,
    )  # fmt: skip
    trainer.fit(Model())
    found.append((trainer.num_training_batches, trainer.num_val_batches, validations))
    # (overfit_batches=3.0 is 3 for both, but Lightning then limits training by the float 3.0: every batch)
    found.append(Trainer(overfit_batches=3.0).overfit_batches)
    for bad in ({"limit_train_batches": 1.2}, {"limit_test_batches": -0.1}, {"val_check_interval": 1.5},
                {"overfit_batches": 1.2}, {"fast_dev_run": -1}):  # fmt: skip
        try:
            Trainer(**bad)
        except (PlMisconfiguration, TmMisconfiguration) as error:
            found.append(("refused", isinstance(error, ValueError) or Trainer is pl.Trainer))
    found.append([Trainer(fast_dev_run=value).fast_dev_run for value in (True, 1, 3, False)])
    return found


def test_batch_limits_as_lightning_reads_them(tmp_path):
    theirs, ours = both(limits_as_lightning_reads_them, tmp_path)
    assert ours == theirs
    assert theirs[:2] == [(4, [2], [2, 4]), 3]
    assert theirs[2:] == [("refused", True)] * 5 + [[True, True, 3, False]]


def environment_defaults(Trainer, BoringModel, root, monkeypatch):
    monkeypatch.setenv("PL_TRAINER_LOGGER", "False")
    monkeypatch.setenv("PL_TRAINER_MAX_STEPS", "3")
    monkeypatch.setenv("PL_TRAINER_LIMIT_VAL_BATCHES", "0.5")
    trainer = Trainer(default_root_dir=root, enable_progress_bar=False, enable_checkpointing=False)
    from_environment = (trainer.logger, trainer.max_steps, trainer.limit_val_batches)
    trainer.fit(BoringModel())
    passed = Trainer(max_steps=42, logger=False, default_root_dir=root)  # an argument passed wins
    return from_environment, trainer.global_step, passed.max_steps


def test_trainer_arguments_default_from_pl_trainer_environment_variables(tmp_path, monkeypatch):
    theirs, ours = both(environment_defaults, tmp_path, monkeypatch)
    assert ours == theirs
    assert theirs == ((None, 3, 0.5), 3, 42)


def max_epochs_warnings(Trainer, BoringModel, root):
    import warnings

    class Model(BoringModel):
        def training_step(self, batch, batch_idx):
            self.trainer.should_stop = True
            return super().training_step(batch, batch_idx)

    said = []
    for extra in ({}, {"max_steps": 2}, {"fast_dev_run": True}, {"max_time": {"minutes": 5}}, {"max_epochs": -1}):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer = Trainer(limit_train_batches=1, default_root_dir=root, **QUIET, **extra)
            trainer.fit(Model())
        said.append(
            [type(w.message).__name__ for w in caught if "`max_epochs` was not set" in str(w.message)]
            + [trainer.max_epochs, trainer.current_epoch]
        )
    return said


def test_a_fit_without_limits_says_it_stops_after_1000_epochs(tmp_path):
    theirs, ours = both(max_epochs_warnings, tmp_path)
    assert ours == theirs
    assert theirs[0] == ["PossibleUserWarning", 1000, 1] and all(len(row) == 2 for row in theirs[1:])


def worker_warnings(Trainer, BoringModel, root, monkeypatch):
    import os
    import warnings

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)  # an 8-CPU machine
    model = BoringModel()
    found = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = Trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=1, default_root_dir=root, **QUIET)
        trainer.fit(model)
        trainer.test(model, verbose=False)
        trainer.predict(model)
    for warning in caught:
        text = str(warning.message)
        if "does not have many workers" in text:
            found.append((type(warning.message).__name__, text.split("'")[1], text.split("num_workers=")[1][:1]))
    return found


def test_loaders_without_workers_are_warned_of_as_lightning_does(tmp_path, monkeypatch):
    theirs, ours = both(worker_warnings, tmp_path, monkeypatch)
    assert sorted(ours) == sorted(theirs)
    assert ("PossibleUserWarning", "val_dataloader", "7") in theirs
