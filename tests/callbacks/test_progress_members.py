"""The members Lightning 2.6's ``ProgressBar`` base gives a bar (callbacks/progress/members.py), read
by a callback during a fit and a test under Lightning's default bar and trainmesh's: the batch
totals (``total_val_batches`` 0 in an epoch that does not validate, as Lightning's own
test_check_val_every_n_epoch reads it), the current evaluation loader's total, the descriptions."""

import pytest

import trainmesh as tm
from trainmesh.demos.boring_classes import BoringModel as TmBoringModel

pl = pytest.importorskip("lightning.pytorch")
from lightning.pytorch.demos.boring_classes import BoringModel as PlBoringModel  # noqa: E402


def read_the_bar(Trainer, BoringModel, Callback, root):
    seen = []

    def bar_of(trainer):
        return trainer.progress_bar_callback

    class Reader(Callback):
        def on_train_epoch_end(self, trainer, pl_module):
            bar = bar_of(trainer)
            seen.append(("epoch", bar.total_train_batches, bar.total_val_batches, bar.is_enabled))

        def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
            if not trainer.sanity_checking:
                seen.append(("val", dataloader_idx, bar_of(trainer).total_val_batches_current_dataloader))

        def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
            seen.append(("test", dataloader_idx, bar_of(trainer).total_test_batches_current_dataloader))

    class Model(BoringModel):
        def val_dataloader(self):
            return [super().val_dataloader(), super().val_dataloader()]

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            return super().validation_step(batch, batch_idx)

        test_dataloader = val_dataloader
        test_step = validation_step

    trainer = Trainer(
        default_root_dir=root, max_epochs=2, limit_train_batches=3, limit_val_batches=2, limit_test_batches=1,
        check_val_every_n_epoch=2, logger=False, enable_checkpointing=False, callbacks=[Reader()],
    )  # fmt: skip
    trainer.fit(Model())
    trainer.test(Model(), verbose=False)
    bar = trainer.progress_bar_callback
    descriptions = (bar.train_description, bar.validation_description, bar.test_description, bar.predict_description)
    bar.disable()
    return seen, descriptions, bar.sanity_check_description, bar.is_disabled


def test_a_callback_reads_lightnings_progress_bar_members(tmp_path):
    theirs = read_the_bar(pl.Trainer, PlBoringModel, pl.Callback, tmp_path / "pl")
    ours = read_the_bar(tm.Trainer, TmBoringModel, tm.Callback, tmp_path / "tm")
    assert ours == theirs
    assert theirs[0][:3] == [("epoch", 3, 0, True), ("val", 0, 2), ("val", 0, 2)]


def lines_of_a_bar_written_on_the_base(Trainer, BoringModel, ProgressBar, root):
    """vis4d's DefaultProgressBar pattern: a bar written on the base with Lightning's own bars' ``_enabled``
    attribute and disable()/enable(), printing (here: recording) a line per batch from the base's members.
    Its test hook reads the current loader's total before telling the base which loader it is in."""
    lines = []

    class LineBar(ProgressBar):
        def __init__(self):
            super().__init__()
            self._enabled = True

        def disable(self):
            self._enabled = False

        def enable(self):
            self._enabled = True

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if self._enabled:
                lines.append((trainer.current_epoch, batch_idx + 1, self.total_train_batches))

        def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
            try:
                total = self.total_test_batches_current_dataloader
            except AssertionError:  # Lightning's, before has_dataloader_changed is first called
                total = "AssertionError"
            self.has_dataloader_changed(dataloader_idx)
            lines.append(("test", self._enabled, batch_idx + 1, total, self.total_test_batches_current_dataloader))

    bar = LineBar()
    trainer = Trainer(
        default_root_dir=root, max_epochs=2, limit_train_batches=2, limit_val_batches=1, limit_test_batches=2,
        logger=False, enable_checkpointing=False, enable_model_summary=False, callbacks=[bar],
    )  # fmt: skip
    trainer.fit(BoringModel())
    trainer.validate(BoringModel(), verbose=False)
    bar.disable()
    trainer.test(BoringModel(), verbose=False)
    bar.enable()
    trainer.test(BoringModel(), verbose=False)
    trainer.predict(BoringModel())
    return lines, trainer.progress_bar_callback is bar


def test_a_bar_written_on_the_base_draws_only_its_own_lines_as_lightnings(tmp_path, capsys):
    """Lightning's base draws nothing: no "Epoch ..." / "Testing: N batches" / "Predicting: ..." line of
    trainmesh's drawing bar beside the program's own bar, in fit, validate, test or predict."""
    theirs = lines_of_a_bar_written_on_the_base(pl.Trainer, PlBoringModel, pl.callbacks.ProgressBar, tmp_path / "pl")
    their_out = capsys.readouterr()
    tests = [("test", False, 1, "AssertionError", 2), ("test", False, 2, 2, 2), ("test", True, 1, 2, 2)]
    assert theirs == ([(0, 1, 2), (0, 2, 2), (1, 1, 2), (1, 2, 2), *tests, ("test", True, 2, 2, 2)], True)
    ours = lines_of_a_bar_written_on_the_base(tm.Trainer, TmBoringModel, tm.callbacks.ProgressBar, tmp_path / "tm")
    our_out = capsys.readouterr()
    assert ours == theirs
    assert (our_out.out, our_out.err) == (their_out.out, their_out.err) == ("", "")


def test_the_base_leaves_disable_and_enable_to_the_bar_written_on_it():
    for ProgressBar in (pl.callbacks.ProgressBar, tm.callbacks.ProgressBar):
        bar = ProgressBar()
        for switch in (bar.disable, bar.enable):
            with pytest.raises(NotImplementedError):
                switch()
        assert not hasattr(bar, "is_enabled") and not hasattr(bar, "refresh_rate")
        with pytest.raises(TypeError, match="unexpected keyword argument 'refresh_rate'"):
            ProgressBar(refresh_rate=1)
