"""The info lines a program sees from Lightning 2.6 and from trainmesh for the same program: the
batch limits given as 1 or 1.0 (Lightning's ``_determine_batch_limits``, its ".." included),
``fast_dev_run``, the AMP precision chosen, a checkpoint restored ("Restoring states ...", "Restored
all states ..." for fit, "Loaded model weights ..." for validate), ``save_checkpoint`` without
``weights_only``; and ``precision`` given beside a precision plugin raising Lightning's "Received
both" (the default, None, does not)."""

from __future__ import annotations

import logging
import re
import warnings

import pytest

from helpers.programs import port

pytest.importorskip("lightning.pytorch")

_NOT_COMPARED = ("💡 Tip", "GPU available", "TPU available", "Seed set")


def _program(L, name, root):
    if name == "lightning":
        from lightning.pytorch.demos.boring_classes import BoringModel
        from lightning.pytorch.plugins import MixedPrecision
    else:
        from trainmesh.demos.boring_classes import BoringModel
        from trainmesh.plugins import MixedPrecision
    quiet = dict(logger=False, enable_progress_bar=False, enable_model_summary=False, default_root_dir=root)
    quiet["accelerator"] = "cpu"
    trainer = L.pl.Trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=1.0, limit_test_batches=1, **quiet)
    trainer.fit(BoringModel())
    trainer.save_checkpoint(root / "a.ckpt")
    trainer = L.pl.Trainer(max_epochs=2, limit_train_batches=2, limit_val_batches=1, precision="bf16-mixed", **quiet)
    trainer.fit(BoringModel(), ckpt_path=str(root / "a.ckpt"))
    trainer.validate(BoringModel(), ckpt_path=str(root / "a.ckpt"))
    L.pl.Trainer(fast_dev_run=2, overfit_batches=1, **quiet)
    L.pl.Trainer(overfit_batches=1, limit_predict_batches=1.0, val_check_interval=1, **quiet)
    raised = []
    for precision in (32, "32-true", "bf16-mixed", None):
        try:
            L.pl.Trainer(precision=precision, plugins=[MixedPrecision("bf16-mixed", "cpu")], **quiet)
            raised.append(None)
        except ValueError as error:
            raised.append(re.sub(r" at 0x[0-9a-f]+", "", str(error)).replace("trainmesh.plugins.precision", "PKG"))
    return raised


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno == logging.INFO:
            self.lines.append(record.getMessage())


def _run(name, root):
    """The INFO lines of the program (from Lightning's loggers or trainmesh's) and what it raised."""
    L = port(name)  # which quiets Lightning's logger to WARNING: INFO again below
    lines = _Lines()
    loggers = [logging.getLogger(n) for n in ("lightning.pytorch", "lightning.fabric", "trainmesh")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(lines)
        logger.setLevel(logging.INFO)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            raised = _program(L, name, root)
    finally:
        for logger, level in zip(loggers, levels):
            logger.removeHandler(lines)
            logger.setLevel(level)
    said = [line.replace(str(root), "ROOT") for line in lines.lines]
    return [line for line in said if not line.startswith(_NOT_COMPARED)], raised


def test_the_info_lines_and_the_precision_check_are_lightnings(tmp_path):
    theirs = _run("lightning", tmp_path / "lightning")
    ours = _run("trainmesh", tmp_path / "trainmesh")
    assert "Restored all states from the checkpoint at ROOT/a.ckpt" in theirs[0]  # the reference
    assert ours[0] == theirs[0]
    theirs_raised = [
        None if r is None else r.replace("lightning.pytorch.plugins.precision.amp", "PKG") for r in theirs[1]
    ]
    assert ours[1] == theirs_raised
