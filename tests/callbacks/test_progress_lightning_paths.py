"""Lightning's module paths under ``callbacks.progress`` (``rich_progress``, ``tqdm_progress``,
``progress_bar``), which published programs import from (Lightning's bug-report template:
``from lightning.pytorch.callbacks.progress.rich_progress import RichProgressBarTheme``): the port
imports the same names from ``trainmesh.callbacks.progress.*``; a theme holds Lightning's fields and
defaults, and a fit drawn with it trains Lightning's weights."""

from __future__ import annotations

import dataclasses
import importlib

import pytest

from helpers.programs import differences, outcome, run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")

PATHS = {
    "rich_progress": ("RichProgressBar", "RichProgressBarTheme"),
    "tqdm_progress": ("TQDMProgressBar",),
    "progress_bar": ("ProgressBar",),
}


def themed_fit(L, root):
    package = L.pl.__name__ + ".callbacks.progress"
    rich = importlib.import_module(package + ".rich_progress")
    theme = rich.RichProgressBarTheme(metrics="grey7", metrics_text_delimiter="\t", metrics_format=".3f")
    bar = rich.RichProgressBar(refresh_rate=1, leave=False, theme=theme)
    demos = importlib.import_module(L.pl.__name__ + ".demos")
    model = demos.BoringModel()
    settings = dict(max_epochs=1, limit_train_batches=2, limit_val_batches=1, callbacks=[bar], logger=False)
    trainer = L.pl.Trainer(**{**trainer_kwargs(root, **settings), "enable_progress_bar": True})
    trainer.fit(model)
    names = {path: [hasattr(importlib.import_module(f"{package}.{path}"), n) for n in ns] for path, ns in PATHS.items()}
    return (
        outcome(trainer, model, root),
        dataclasses.asdict(theme),
        dataclasses.asdict(rich.RichProgressBarTheme()),
        names,
    )


def test_lightnings_progress_module_paths_port(tmp_path):
    found = run_both(themed_fit, tmp_path)
    assert differences(found["lightning"], found["trainmesh"]) == []
    assert all(all(has) for has in found["trainmesh"][3].values())
