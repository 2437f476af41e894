"""What each loop reads from the data and when, measured against Lightning 2.6 itself.

The same small program runs under ``lightning.pytorch.Trainer`` and under ``trainmesh.Trainer``
with the same arguments: datasets that record each sample they hand out (map-style, and iterable
with and without ``__len__``), a module and a callback that record every hook Lightning 2.6 defines
(the data hooks ``train_dataloader``/``val_dataloader``/..., ``on_after_batch_transfer`` and the
steps included). The two runs' event sequences, reads interleaved with the hooks, must be equal:
the same samples read (no batch read past a ``limit_*_batches`` or ``max_steps``; one read ahead
exactly where Lightning's fetcher prefetches, for a loader without a length) and the loaders
requested at the same points (after ``setup`` and ``on_fit_start``, inside the sanity check).

Hooks left out of the comparison, each for a reason:
- ``configure_sharded_model``: Lightning 1.x's name, which trainmesh runs with a deprecation
  warning (tests/trainer/test_legacy_hooks.py) and Lightning 2.6 does not call.
"""

from __future__ import annotations

import itertools
import logging
import warnings
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from helpers.differential import api

SAMPLES, BATCH = 64, 8  # 8 batches per epoch

MODULE_HOOKS = """
    prepare_data setup teardown configure_model configure_optimizers
    on_fit_start on_fit_end on_train_start on_train_end on_validation_start on_validation_end
    on_test_start on_test_end on_predict_start on_predict_end
    on_train_batch_start on_train_batch_end on_validation_batch_start on_validation_batch_end
    on_test_batch_start on_test_batch_end on_predict_batch_start on_predict_batch_end
    on_validation_model_zero_grad on_validation_model_eval on_validation_model_train
    on_test_model_eval on_test_model_train on_predict_model_eval
    on_train_epoch_start on_train_epoch_end on_validation_epoch_start on_validation_epoch_end
    on_test_epoch_start on_test_epoch_end on_predict_epoch_start on_predict_epoch_end
    on_before_zero_grad on_before_backward on_after_backward on_before_optimizer_step
    transfer_batch_to_device on_before_batch_transfer on_after_batch_transfer
    on_save_checkpoint on_load_checkpoint
""".split()
CALLBACK_HOOKS = """
    setup teardown on_fit_start on_fit_end on_sanity_check_start on_sanity_check_end
    on_train_batch_start on_train_batch_end on_train_epoch_start on_train_epoch_end
    on_validation_epoch_start on_validation_epoch_end on_test_epoch_start on_test_epoch_end
    on_predict_epoch_start on_predict_epoch_end on_validation_batch_start on_validation_batch_end
    on_test_batch_start on_test_batch_end on_predict_batch_start on_predict_batch_end
    on_train_start on_train_end on_validation_start on_validation_end on_test_start on_test_end
    on_predict_start on_predict_end on_exception state_dict load_state_dict on_save_checkpoint
    on_load_checkpoint on_before_backward on_after_backward on_before_optimizer_step on_before_zero_grad
""".split()

EVENTS: list[str] = []


class Samples(Dataset):
    """A map-style dataset recording each sample read."""

    def __init__(self, split: str) -> None:
        self.split = split
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(SAMPLES, 4, generator=g), torch.randn(SAMPLES, 1, generator=g)

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int):
        EVENTS.append(f"read {self.split}")
        return self.x[index], self.y[index]


class Stream(IterableDataset):
    """An iterable dataset recording each sample it yields."""

    def __init__(self, split: str) -> None:
        self.samples = Samples(split)

    def __iter__(self):
        EVENTS.append(f"iter {self.samples.split}")  # when the loop's iterator is made
        return (self.samples[i] for i in range(SAMPLES))


class SizedStream(Stream):
    def __len__(self) -> int:
        return SAMPLES


DATASETS = {"map": Samples, "stream": Stream, "sized_stream": SizedStream}


def _recorder(name: str, prefix: str):
    def hook(self, *args, **kwargs):
        EVENTS.append(prefix + name)
        if name in ("on_before_batch_transfer", "on_after_batch_transfer", "transfer_batch_to_device"):
            return args[0]  # the batch, on the CPU as it came
        if name == "configure_optimizers":
            return torch.optim.SGD(self.parameters(), lr=0.1)
        if name == "state_dict":
            return {}
        return getattr(super(type(self), self), name)(*args, **kwargs)

    return hook


def _program(framework: str):
    """The module and callback classes built on ``framework``'s base classes, and its Trainer."""
    if framework == "lightning":
        pytest.importorskip("lightning.pytorch")
    L = api(framework)  # the shared harness's (helpers/differential.py)
    module_base, callback_base, trainer_class = L.Module, L.Callback, L.Trainer

    class Net(module_base):
        def __init__(self, data: str) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)
            self.data = data

        def _loader(self, split: str) -> Any:
            EVENTS.append(f"{split}_dataloader")
            if self.data == "two" and split != "train":  # a stream, then a map-style dataset
                return [DataLoader(Stream(split), batch_size=BATCH), DataLoader(Samples(split), batch_size=BATCH)]
            return DataLoader(DATASETS.get(self.data, Samples)(split), batch_size=BATCH)

        def train_dataloader(self):
            return self._loader("train")

        def val_dataloader(self):
            return self._loader("val")

        def test_dataloader(self):
            return self._loader("test")

        def predict_dataloader(self):
            return self._loader("predict")

        def training_step(self, batch, batch_idx):
            EVENTS.append("training_step")
            return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            EVENTS.append("validation_step")

        def test_step(self, batch, batch_idx, dataloader_idx=0):
            EVENTS.append("test_step")

        def predict_step(self, batch, batch_idx, dataloader_idx=0):
            EVENTS.append("predict_step")
            return self.layer(batch[0])

    for name in MODULE_HOOKS:
        setattr(Net, name, _recorder(name, ""))

    class Recorder(callback_base):
        pass

    for name in CALLBACK_HOOKS:
        setattr(Recorder, name, _recorder(name, "Callback."))
    return Net, Recorder, trainer_class


def _compressed(events: list[str]) -> list[str]:
    """Runs of one event written once with their length ("read train x8")."""
    out = []
    for name, run in itertools.groupby(events):
        n = len(list(run))
        out.append(f"{name} x{n}" if n > 1 else name)
    return out


def run(framework: str, stage: str, data: str, **settings) -> list[str]:
    """The events of ``stage`` run under ``framework``, runs of one event written once."""
    return _compressed(events(framework, stage, data, **settings))


def events(framework: str, stage: str, data: str, **settings) -> list[str]:
    net, recorder, trainer_class = _program(framework)
    EVENTS.clear()
    torch.manual_seed(0)
    trainer = trainer_class(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[recorder()],
        **settings,
    )
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)  # its info lines, not trainmesh's
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if stage == "predict":
            getattr(trainer, stage)(net(data))
        elif stage == "fit":
            trainer.fit(net(data))
        else:
            getattr(trainer, stage)(net(data), verbose=False)
    return list(EVENTS)


CASES = {
    "int_limits": ("fit", "map", dict(max_epochs=2, limit_train_batches=3, limit_val_batches=2)),
    "fraction_limits": ("fit", "map", dict(max_epochs=2, limit_train_batches=0.5, limit_val_batches=0.25)),
    "no_sanity_check": (
        "fit",
        "map",
        dict(max_epochs=1, limit_train_batches=3, limit_val_batches=2, num_sanity_val_steps=0),
    ),
    "val_check_interval_int": (
        "fit",
        "map",
        dict(max_epochs=1, limit_train_batches=5, limit_val_batches=1, val_check_interval=2),
    ),
    "val_check_interval_fraction": ("fit", "map", dict(max_epochs=1, limit_val_batches=1, val_check_interval=0.5)),
    "max_steps_mid_epoch": ("fit", "map", dict(max_steps=3, limit_val_batches=1)),
    "stream_int_limits": ("fit", "stream", dict(max_epochs=2, limit_train_batches=3, limit_val_batches=2)),
    "stream_whole": ("fit", "stream", dict(max_epochs=1, num_sanity_val_steps=0)),
    "stream_max_steps": ("fit", "stream", dict(max_steps=3, limit_val_batches=1)),
    "sized_stream_limits": ("fit", "sized_stream", dict(max_epochs=1, limit_train_batches=3, limit_val_batches=2)),
    "check_val_every_n_epoch": (
        "fit",
        "map",
        dict(
            max_epochs=2, limit_train_batches=2, limit_val_batches=1, check_val_every_n_epoch=2, num_sanity_val_steps=0
        ),
    ),
    "accumulate_stream": ("fit", "stream", dict(max_epochs=1, accumulate_grad_batches=3, limit_val_batches=1)),
    "two_val_loaders": ("fit", "two", dict(max_epochs=1, limit_train_batches=2, limit_val_batches=2)),
    "two_val_loaders_whole": ("fit", "two", dict(max_epochs=1, limit_train_batches=1, num_sanity_val_steps=0)),
    "limit_train_zero": ("fit", "map", dict(max_epochs=1, limit_train_batches=0, limit_val_batches=1)),
    "validate": ("validate", "map", dict(limit_val_batches=2)),
    "validate_stream": ("validate", "stream", dict()),
    "test": ("test", "map", dict(limit_test_batches=0.25)),
    "test_stream": ("test", "stream", dict(limit_test_batches=3)),
    "predict": ("predict", "map", dict(limit_predict_batches=3)),
    "predict_stream": ("predict", "stream", dict()),
    "test_two_loaders": ("test", "two", dict(limit_test_batches=3)),
    "predict_two_loaders": ("predict", "two", dict()),
}


@pytest.mark.parametrize("case", list(CASES))
def test_reads_and_hook_order_as_lightning(case):
    stage, data, settings = CASES[case]
    expected = run("lightning", stage, data, **settings)
    assert run("trainmesh", stage, data, **settings) == expected


def test_the_issues_figures():
    """Issue 34's program: limit_train_batches=3, limit_val_batches=2, batch 8, one epoch. Lightning
    2.6 reads 24 training and 16 validation samples and calls on_after_batch_transfer 3 times in
    training (trainmesh read 32 and 24, and called it 4 times)."""
    settings = dict(max_epochs=1, limit_train_batches=3, limit_val_batches=2, num_sanity_val_steps=0)

    def counts(framework):
        seen = events(framework, "fit", "map", **settings)
        training = seen[seen.index("on_train_start") : seen.index("on_validation_model_zero_grad")]
        return seen.count("read train"), seen.count("read val"), training.count("on_after_batch_transfer")

    assert counts("lightning") == (24, 16, 3)
    assert counts("trainmesh") == (24, 16, 3)
