import math
import os
import warnings
from types import SimpleNamespace

import pytest
import torch

from trainmesh.callbacks.model_checkpoint import ModelCheckpoint, render_filename
from trainmesh.checkpoint import remove_checkpoint
from trainmesh.utilities.exceptions import MisconfigurationException


class FakeRuntime:
    device = torch.device("cpu")

    def __init__(self):
        self.broadcasts = []

    def broadcast(self, obj, src=0):
        self.broadcasts.append(obj)
        return obj

    def all_reduce(self, value, op="mean"):
        return value

    def barrier(self, name=None):
        return None


def make_trainer(tmp_path, **overrides):
    values = dict(
        current_epoch=0,
        global_step=0,
        callback_metrics={},
        is_global_zero=True,
        global_rank=0,
        world_size=1,
        log_dir=str(tmp_path / "logs"),
        default_root_dir=str(tmp_path),
        loggers=[],
        runtime=FakeRuntime(),
        should_stop=False,
        optimizers=[],
        lr_scheduler_configs=[],
        sanity_checking=False,
        fast_dev_run=0,
        loop=SimpleNamespace(mid_epoch_validation=False),
        stage="fit",
        callbacks=[],
        ckpt_path=None,
    )
    values.update(overrides)
    trainer = SimpleNamespace(**values)
    trainer.saved = []

    def save_checkpoint(path, weights_only=None):  # as ModelCheckpoint calls it: (path, save_weights_only)
        # What the real Trainer does, in small: every callback's state goes into the file.
        state = {cb.state_key: cb.state_dict() for cb in trainer.callbacks}
        os.makedirs(os.path.dirname(path), exist_ok=True)
        torch.save({"global_step": trainer.global_step, "callbacks": state}, path)
        trainer.saved.append(path)

    trainer.save_checkpoint = save_checkpoint
    trainer.remove_checkpoint = remove_checkpoint
    return trainer


def attach(trainer, callback):
    trainer.callbacks.append(callback)
    callback.setup(trainer, None, "fit")
    callback.on_train_start(trainer, None)
    return callback


def end_epoch(callback, trainer, metrics, *, steps=10, validate=True):
    """One epoch of ``steps`` optimizer steps, then validation and the epoch-end hook."""
    trainer.global_step += steps
    trainer.callback_metrics = dict(metrics)
    if validate:
        callback.on_validation_end(trainer, None)
    callback.on_train_epoch_end(trainer, None)
    trainer.current_epoch += 1


def files_in(directory):
    return sorted(name for name in os.listdir(directory) if not name.startswith("."))


def test_setup_puts_checkpoints_under_default_root_dir_without_a_logger(tmp_path):
    # Lightning's __resolve_ckpt_dir: default_root_dir/checkpoints, or the first logger's
    # save_dir/name/version/checkpoints (tests/callbacks/test_model_checkpoint_paths_lightning.py)
    trainer = make_trainer(tmp_path)
    checkpoint = attach(trainer, ModelCheckpoint())
    assert checkpoint.dirpath == str(tmp_path / "checkpoints")
    assert trainer.runtime.broadcasts == [checkpoint.dirpath]


def test_explicit_dirpath_is_kept_and_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    checkpoint = attach(make_trainer(tmp_path), ModelCheckpoint(dirpath="ckpts"))
    assert checkpoint.dirpath == str(tmp_path / "ckpts")


def test_top_k_min_keeps_the_k_lowest_and_deletes_the_rest(tmp_path):
    trainer = make_trainer(tmp_path)
    checkpoint = attach(trainer, ModelCheckpoint(dirpath=tmp_path / "c", monitor="val_loss", save_top_k=2))
    for loss in (0.5, 0.4, 0.6, 0.3):
        end_epoch(checkpoint, trainer, {"val_loss": loss})
    # 0.6 never made the top 2 and was never written; 0.5 was written, then deleted.
    assert [os.path.basename(p) for p in trainer.saved] == [
        "epoch=0-step=10.ckpt",
        "epoch=1-step=20.ckpt",
        "epoch=3-step=40.ckpt",
    ]
    assert files_in(tmp_path / "c") == ["epoch=1-step=20.ckpt", "epoch=3-step=40.ckpt"]
    assert checkpoint.best_model_path == str(tmp_path / "c" / "epoch=3-step=40.ckpt")
    assert checkpoint.best_model_score == pytest.approx(0.3)
    assert checkpoint.kth_best_model_path == str(tmp_path / "c" / "epoch=1-step=20.ckpt")
    assert checkpoint.kth_value == pytest.approx(0.4)
    assert sorted(checkpoint.best_k_models.values()) == pytest.approx([0.3, 0.4])
    assert checkpoint.current_score == pytest.approx(0.3)


def test_top_k_max_keeps_the_highest(tmp_path):
    trainer = make_trainer(tmp_path)
    checkpoint = attach(
        trainer, ModelCheckpoint(dirpath=tmp_path, monitor="acc", mode="max", save_top_k=1, filename="{acc:.2f}")
    )
    for acc in (0.7, 0.9, 0.8):
        end_epoch(checkpoint, trainer, {"acc": acc})
    assert files_in(tmp_path) == ["acc=0.90.ckpt"]
    assert checkpoint.best_model_score == pytest.approx(0.9)
    assert checkpoint.best_k_models == {str(tmp_path / "acc=0.90.ckpt"): pytest.approx(0.9)}


def test_save_top_k_all_keeps_every_checkpoint(tmp_path):
    trainer = make_trainer(tmp_path)
    checkpoint = attach(trainer, ModelCheckpoint(dirpath=tmp_path, monitor="val_loss", save_top_k=-1))
    for loss in (0.5, 0.6, 0.4):
        end_epoch(checkpoint, trainer, {"val_loss": loss})
    assert len(files_in(tmp_path)) == 3
    assert checkpoint.best_model_score == pytest.approx(0.4)
    assert checkpoint.kth_value == pytest.approx(0.6)


def test_nan_never_beats_a_real_value(tmp_path):
    trainer = make_trainer(tmp_path)
    checkpoint = attach(trainer, ModelCheckpoint(dirpath=tmp_path, monitor="val_loss", save_top_k=2))
    end_epoch(checkpoint, trainer, {"val_loss": float("nan")})
    assert checkpoint.best_model_score == math.inf  # kept while there is room, ranked worst
    end_epoch(checkpoint, trainer, {"val_loss": 0.5})
    end_epoch(checkpoint, trainer, {"val_loss": float("nan")})
    end_epoch(checkpoint, trainer, {"val_loss": 0.7})
    assert sorted(checkpoint.best_k_models.values()) == pytest.approx([0.5, 0.7])
    assert len(files_in(tmp_path)) == 2


def test_no_monitor_keeps_only_the_latest(tmp_path):
    trainer = make_trainer(tmp_path)
    checkpoint = attach(trainer, ModelCheckpoint(dirpath=tmp_path))
    for _ in range(3):
        end_epoch(checkpoint, trainer, {})
    assert files_in(tmp_path) == ["epoch=2-step=30.ckpt"]
    assert checkpoint.best_model_path == str(tmp_path / "epoch=2-step=30.ckpt")
    assert checkpoint.best_model_score is None


def test_no_monitor_with_a_fixed_name_overwrites_its_own_file(tmp_path):
    trainer = make_trainer(tmp_path)
    checkpoint = attach(trainer, ModelCheckpoint(dirpath=tmp_path, filename="model"))
    end_epoch(checkpoint, trainer, {})
    end_epoch(checkpoint, trainer, {})
    assert files_in(tmp_path) == ["model.ckpt"]
    assert torch.load(tmp_path / "model.ckpt")["global_step"] == 20


def test_no_monitor_save_all_and_save_none(tmp_path):
    trainer = make_trainer(tmp_path)
    keep_all = attach(trainer, ModelCheckpoint(dirpath=tmp_path / "all", save_top_k=-1))
    none = attach(trainer, ModelCheckpoint(dirpath=tmp_path / "none", save_top_k=0, save_last=True))
    for _ in range(3):
        trainer.global_step += 5
        keep_all.on_train_epoch_end(trainer, None)
        none.on_train_epoch_end(trainer, None)
        trainer.current_epoch += 1
    assert len(files_in(tmp_path / "all")) == 3 and not os.path.exists(tmp_path / "none")  # Lightning 2.6's
    none.on_train_end(trainer, None)  # save_top_k=0: last.ckpt at the fit's end only
    assert files_in(tmp_path / "none") == ["last.ckpt"]


def test_save_last_follows_the_top_k_saves(tmp_path):
    trainer = make_trainer(tmp_path)
    checkpoint = attach(trainer, ModelCheckpoint(dirpath=tmp_path, monitor="val_loss", save_last=True))
    end_epoch(checkpoint, trainer, {"val_loss": 0.5})
    end_epoch(checkpoint, trainer, {"val_loss": 0.9})  # not a top-1 save: last.ckpt stays (Lightning 2.6)
    assert files_in(tmp_path) == ["epoch=0-step=10.ckpt", "last.ckpt"]
    assert checkpoint.last_model_path == str(tmp_path / "last.ckpt")
    stored = torch.load(tmp_path / "last.ckpt")
    assert stored["global_step"] == 10
    # The checkpoint holds the callback state as it was at that save, last_model_path included.
    assert stored["callbacks"][checkpoint.state_key]["last_model_path"] == checkpoint.last_model_path


def test_filename_placeholders_and_metric_names_with_slashes():
    # Lightning 2.6.6's names (checked against it): a "/" stays (a sub-folder), epoch/step come from the values.
    checkpoint = ModelCheckpoint(filename="{epoch:02d}-{val/loss:.3f}")
    assert checkpoint.format_checkpoint_name({"epoch": 3, "val/loss": 0.12345}) == "epoch=03-val/loss=0.123.ckpt"
    default = ModelCheckpoint()
    assert default.format_checkpoint_name({"epoch": 1, "step": 7}) == "epoch=1-step=7.ckpt"
    assert default.format_checkpoint_name({"epoch": 1, "step": 7}, ver=2) == "epoch=1-step=7-v2.ckpt"


def test_filename_names_are_inserted_as_lightning_inserts_them():
    # Lightning inserts "name=" before every field, also after one the template holds already.
    assert (
        render_filename("run-{epoch}-val_loss={val_loss:.1f}", {"epoch": 2, "val_loss": 0.25})
        == "run-epoch=2-val_loss=val_loss=0.2"
    )
    assert render_filename("{epoch}_{step}", {"epoch": 1, "step": 9}, auto_insert_metric_name=False) == "1_9"
    assert render_filename("{missing:.2f}", {}) == "missing=0.00"


def test_filename_with_a_bad_format_spec_says_why():
    with pytest.raises(ValueError, match="cannot format the values"):
        render_filename("{val_loss:03d}", {"val_loss": 0.5})


def test_dirpath_joins_the_formatted_name(tmp_path):
    checkpoint = ModelCheckpoint(dirpath=tmp_path, filename="{step}")
    assert checkpoint.format_checkpoint_name({"step": 5}) == str(tmp_path / "step=5.ckpt")


def test_every_n_train_steps_saves_once_per_due_step(tmp_path):
    trainer = make_trainer(tmp_path)
    checkpoint = attach(trainer, ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=2, save_top_k=-1))
    # Accumulating two batches per step: each step shows up at two batch ends.
    for batch_idx in range(8):
        trainer.global_step = (batch_idx + 1) // 2
        checkpoint.on_train_batch_end(trainer, None, None, None, batch_idx)
    assert [torch.load(p)["global_step"] for p in trainer.saved] == [2, 4]
    # The epoch cadence is off when only a step cadence is given; and step 4 is saved already.
    checkpoint.on_train_epoch_end(trainer, None)
    assert len(trainer.saved) == 2


def test_two_cadences_are_refused_as_lightning_refuses_them(tmp_path):
    # Lightning 2.6 raises MisconfigurationException for every_n_train_steps with every_n_epochs.
    with pytest.raises(MisconfigurationException, match="every_n_train_steps=5, every_n_epochs=1"):
        ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=5, every_n_epochs=1, save_top_k=-1)


def test_every_n_epochs(tmp_path):
    trainer = make_trainer(tmp_path)
    checkpoint = attach(trainer, ModelCheckpoint(dirpath=tmp_path, every_n_epochs=2, save_top_k=-1))
    for _ in range(5):
        end_epoch(checkpoint, trainer, {})
    assert files_in(tmp_path) == ["epoch=1-step=20.ckpt", "epoch=3-step=40.ckpt"]


def test_save_after_every_validation_when_not_on_train_epoch_end(tmp_path):
    trainer = make_trainer(tmp_path)
    checkpoint = attach(
        trainer, ModelCheckpoint(dirpath=tmp_path, monitor="val_loss", save_top_k=-1, save_on_train_epoch_end=False)
    )
    trainer.global_step, trainer.callback_metrics = 3, {"val_loss": 0.4}
    trainer.loop.mid_epoch_validation = True
    checkpoint.on_validation_end(trainer, None)  # a mid-epoch validation after this batch: saved here
    trainer.loop.mid_epoch_validation = False
    assert [torch.load(p)["global_step"] for p in trainer.saved] == [3]
    trainer.global_step = 4
    checkpoint.on_train_batch_end(trainer, None, None, None, 3)  # no validation: no save
    end_epoch(checkpoint, trainer, {"val_loss": 0.3}, steps=2)
    trainer.global_step += 6
    checkpoint.on_train_epoch_end(trainer, None)  # an epoch without validation: no save
    assert [torch.load(p)["global_step"] for p in trainer.saved] == [3, 6]


def test_existing_file_of_another_run_gets_a_version_suffix(tmp_path):
    (tmp_path / "epoch=0-step=10.ckpt").write_bytes(b"another run")
    (tmp_path / "epoch=0-step=10-v1.ckpt").write_bytes(b"another run")
    (tmp_path / "last.ckpt").write_bytes(b"another run")
    trainer = make_trainer(tmp_path)
    checkpoint = attach(trainer, ModelCheckpoint(dirpath=tmp_path, save_last=True))
    end_epoch(checkpoint, trainer, {})  # no warning of its own: Lightning's is the folder's, at setup
    assert checkpoint.best_model_path == str(tmp_path / "epoch=0-step=10-v2.ckpt")
    assert checkpoint.last_model_path == str(tmp_path / "last-v1.ckpt")
    end_epoch(checkpoint, trainer, {})
    # Our own files are replaced; the other run's files are never touched.
    assert files_in(tmp_path) == [
        "epoch=0-step=10-v1.ckpt",
        "epoch=0-step=10.ckpt",
        "epoch=1-step=20.ckpt",
        "last-v1.ckpt",
        "last.ckpt",
    ]
    assert (tmp_path / "last.ckpt").read_bytes() == b"another run"


def test_only_global_zero_deletes_but_every_rank_saves(tmp_path):
    trainer = make_trainer(tmp_path, is_global_zero=False, global_rank=1)
    checkpoint = attach(trainer, ModelCheckpoint(dirpath=tmp_path))
    end_epoch(checkpoint, trainer, {})
    end_epoch(checkpoint, trainer, {})
    assert len(trainer.saved) == 2
    assert len(files_in(tmp_path)) == 2  # rank 0 would have deleted the first


def test_missing_monitor_raises_with_the_available_names(tmp_path):
    trainer = make_trainer(tmp_path)
    checkpoint = attach(trainer, ModelCheckpoint(dirpath=tmp_path, monitor="val_acc"))
    # in the order Lightning lists them: the logged metrics, then epoch and step
    with pytest.raises(MisconfigurationException, match=r"'val_acc'.*\['val_loss', 'train_loss', 'epoch', 'step'\]"):
        end_epoch(checkpoint, trainer, {"val_loss": 0.1, "train_loss": 0.2})


def test_missing_monitor_is_not_checked_when_no_save_is_due(tmp_path):
    fast = make_trainer(tmp_path, fast_dev_run=1)
    checkpoint = attach(fast, ModelCheckpoint(dirpath=tmp_path, monitor="val_acc"))
    end_epoch(checkpoint, fast, {})
    assert fast.saved == []
    sanity = make_trainer(tmp_path, sanity_checking=True)
    checkpoint = attach(sanity, ModelCheckpoint(dirpath=tmp_path, monitor="val_acc"))
    end_epoch(checkpoint, sanity, {})
    assert sanity.saved == []


def test_step_save_before_its_metric_is_logged_waits_for_validation(tmp_path):
    """Lightning 2.6.6 defers a step save whose monitored metric is not logged yet to the next
    validation's end (no warning, no file); test_model_checkpoint_ranking_lightning runs it beside Lightning."""
    trainer = make_trainer(tmp_path)
    checkpoint = attach(
        trainer, ModelCheckpoint(dirpath=tmp_path, monitor="val_loss", every_n_train_steps=1, save_last=True)
    )
    trainer.global_step, trainer.callback_metrics = 1, {"train_loss": 1.0}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        checkpoint.on_train_batch_end(trainer, None, None, None, 0)
    assert files_in(tmp_path) == []


def test_state_dict_round_trip_keeps_the_ranking(tmp_path):
    trainer = make_trainer(tmp_path)
    first = attach(trainer, ModelCheckpoint(dirpath=tmp_path, monitor="val_loss", save_top_k=2, save_last=True))
    for loss in (0.5, 0.4):
        end_epoch(first, trainer, {"val_loss": loss})
    state = torch.load(first.last_model_path)["callbacks"][first.state_key]
    assert state == first.state_dict()

    resumed_trainer = make_trainer(tmp_path, current_epoch=2, global_step=20)
    resumed = attach(
        resumed_trainer, ModelCheckpoint(dirpath=tmp_path, monitor="val_loss", save_top_k=2, save_last=True)
    )
    resumed.load_state_dict(state)
    for key in (
        "best_model_path",
        "best_model_score",
        "kth_best_model_path",
        "best_k_models",
        "last_model_path",
        "dirpath",
        "monitor",
    ):
        assert getattr(resumed, key) == getattr(first, key)
    resumed_trainer.global_step = 20  # already saved at this step: no second copy
    resumed.on_train_epoch_end(resumed_trainer, None)
    assert resumed_trainer.saved == []
    end_epoch(resumed, resumed_trainer, {"val_loss": 0.3})
    # The first run's 0.5 checkpoint fell out of the top 2 and was deleted; last.ckpt was reused.
    assert files_in(tmp_path) == ["epoch=1-step=20.ckpt", "epoch=2-step=30.ckpt", "last.ckpt"]


def test_default_dirpath_stays_this_run_s_folder(tmp_path):
    """As Lightning's: the folder resolved at setup (the logger's) is kept, the saved one's ranking
    not taken (a resumed fit with a new logger writes there; trainmesh used to go back to the old
    folder: tests/trainer/test_differential_docs.py compares with Lightning)."""
    state = ModelCheckpoint(dirpath=tmp_path / "old", monitor="m").state_dict()
    checkpoint = attach(make_trainer(tmp_path), ModelCheckpoint(monitor="m"))
    with pytest.warns(UserWarning, match="dirpath has changed"):
        checkpoint.load_state_dict(state)
    assert checkpoint.dirpath == str(tmp_path / "checkpoints")


def test_changed_dirpath_restarts_the_ranking_a_changed_monitor_does_not(tmp_path):
    old = ModelCheckpoint(dirpath=tmp_path / "old", monitor="m")
    old.best_k_models = {str(tmp_path / "old" / "a.ckpt"): 0.1}
    old.best_model_path, old.best_model_score = str(tmp_path / "old" / "a.ckpt"), 0.1
    moved = ModelCheckpoint(dirpath=tmp_path / "new", monitor="m")
    with pytest.warns(UserWarning, match="dirpath has changed"):
        moved.load_state_dict(old.state_dict())
    # As Lightning: only best_model_path is taken from another folder's state.
    assert moved.best_k_models == {} and moved.best_model_score is None
    assert moved.best_model_path == str(tmp_path / "old" / "a.ckpt")
    # As Lightning: a state ranked by another monitor is restored, without a warning
    # (tests/trainer/test_restart_hooks_lightning.py compares it with Lightning's)
    other_metric = ModelCheckpoint(dirpath=tmp_path / "old", monitor="acc", mode="max")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        other_metric.load_state_dict(old.state_dict())
    assert other_metric.best_k_models == {str(tmp_path / "old" / "a.ckpt"): pytest.approx(0.1)}


def test_scores_are_tensors_as_in_lightning_and_survive_a_checkpoint(tmp_path):
    # Lightning keeps best_k_models' values (and best_model_score, kth_value, current_score) as
    # tensors: programs call .item() on them, or torch.stack(list(cb.best_k_models.values())).
    trainer = make_trainer(tmp_path)
    first = attach(trainer, ModelCheckpoint(dirpath=tmp_path, monitor="val_loss", save_top_k=2, save_last=True))
    for loss in (0.5, 0.4, 0.6):
        end_epoch(first, trainer, {"val_loss": torch.tensor(loss, dtype=torch.float64)})
    scores = [first.best_k_models[path] for path in sorted(first.best_k_models)]
    assert all(isinstance(score, torch.Tensor) and score.dim() == 0 for score in scores)
    assert torch.stack(scores).tolist() == [0.5, 0.4]
    for score in (first.best_model_score, first.kth_value, first.current_score):
        assert isinstance(score, torch.Tensor) and score.dim() == 0
    # Lightning's: 0.6 did not enter the top 2, so current_score is still the last score saved
    assert (first.best_model_score.item(), first.kth_value.item(), first.current_score.item()) == (0.4, 0.5, 0.4)
    assert first.best_model_score.dtype == torch.float64  # the logged tensor's dtype
    assert first.best_k_models[first.best_model_path].item() == 0.4

    # The saved state holds the tensors and loads with weights_only=True; the ranking goes on.
    state = torch.load(first.last_model_path, weights_only=True)["callbacks"][first.state_key]
    assert isinstance(state["best_model_score"], torch.Tensor)
    assert all(isinstance(score, torch.Tensor) for score in state["best_k_models"].values())
    resumed_trainer = make_trainer(tmp_path, current_epoch=3, global_step=30)
    resumed = attach(
        resumed_trainer, ModelCheckpoint(dirpath=tmp_path, monitor="val_loss", save_top_k=2, save_last=True)
    )
    resumed.load_state_dict(state)
    end_epoch(resumed, resumed_trainer, {"val_loss": 0.45})
    assert sorted(score.item() for score in resumed.best_k_models.values()) == pytest.approx([0.4, 0.45])

    resumed.to_yaml()  # Lightning's ModelCheckpoint.to_yaml: path -> score, as numbers
    import yaml

    written = yaml.safe_load((tmp_path / "best_k_models.yaml").read_text())
    assert written == {path: score.item() for path, score in resumed.best_k_models.items()}


def test_a_checkpoint_written_with_float_scores_still_loads(tmp_path):
    # The state as trainmesh wrote it before the scores were tensors.
    a, b = str(tmp_path / "a.ckpt"), str(tmp_path / "b.ckpt")
    old_state = {
        "monitor": "val_loss",
        "mode": "min",
        "dirpath": str(tmp_path),
        "best_model_path": a,
        "best_model_score": 0.25,
        "current_score": 0.5,
        "last_model_path": "",
        "kth_best_model_path": b,
        "kth_value": 0.5,
        "best_k_models": {a: 0.25, b: 0.5},
        "last_global_step_saved": 20,
    }
    checkpoint = ModelCheckpoint(dirpath=tmp_path, monitor="val_loss", save_top_k=2)
    checkpoint.load_state_dict(old_state)
    assert {path: score.item() for path, score in checkpoint.best_k_models.items()} == {a: 0.25, b: 0.5}
    assert all(isinstance(score, torch.Tensor) for score in checkpoint.best_k_models.values())
    assert (checkpoint.best_model_score.item(), checkpoint.kth_value.item()) == (0.25, 0.5)
    assert checkpoint.current_score is None  # saved, not taken back, as Lightning's load_state_dict


def test_state_key_tells_checkpoint_callbacks_apart():
    assert ModelCheckpoint(monitor="a").state_key != ModelCheckpoint(monitor="b").state_key


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"mode": "lowest"}, "mode"),
        ({"save_top_k": -2}, "save_top_k"),
        ({"save_top_k": 3}, "without a monitored metric"),
        ({"every_n_train_steps": -1}, "every_n_train_steps"),
        ({"every_n_epochs": 1.5}, "every_n_epochs"),
    ],
)
def test_invalid_arguments_are_explained(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ModelCheckpoint(**kwargs)


def test_the_checkpoint_a_run_resumed_from_is_never_deleted(tmp_path):
    # A real fit: trainer.ckpt_path is what the run resumed from, and ModelCheckpoint keeps that
    # file even when it drops out of the top k: it is the way back should the resumed run go wrong.
    from helpers.models import DropoutNet, loaders, quiet_trainer

    class Rising(DropoutNet):
        def training_step(self, batch, batch_idx):
            self.log("score", float(self.global_step))  # every save ranks above the ones before
            return super().training_step(batch, batch_idx)

    def fit(steps, ckpt_path=None):
        callback = ModelCheckpoint(dirpath=tmp_path, monitor="score", mode="max", save_top_k=1, every_n_train_steps=1)
        trainer = quiet_trainer(max_steps=steps, enable_checkpointing=True, callbacks=[callback])
        trainer.fit(Rising(), loaders()[0], ckpt_path=ckpt_path)
        return trainer

    resumed_from = fit(3).checkpoint_callback.best_model_path
    assert files_in(tmp_path) == ["epoch=0-step=3.ckpt"]
    resumed = fit(5, ckpt_path=resumed_from)
    assert files_in(tmp_path) == ["epoch=0-step=3.ckpt", "epoch=0-step=5.ckpt"]  # step 4's was replaced by 5's
    assert resumed.ckpt_path == resumed_from
