import importlib.machinery
import importlib.util
import os
import pickle
import sys
import types

import pytest
import torch
import yaml

import trainmesh.loggers.tensorboard
from trainmesh.loggers import TensorBoardLogger

pytest.importorskip("tensorboard")


def load_events(log_dir: str):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(log_dir, size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    return accumulator


def test_scalars_read_back(tmp_path):
    logger = TensorBoardLogger(tmp_path)
    assert not tmp_path.joinpath("lightning_logs").exists()  # nothing on disk before the first write
    for step in range(3):
        logger.log_metrics({"train/loss": 1.0 / (step + 1), "acc": torch.tensor(0.5 * step)}, step=step)
    logger.finalize("success")

    assert logger.log_dir == str(tmp_path / "lightning_logs" / "version_0")  # as Lightning names it
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(logger.log_dir))
    events = load_events(logger.log_dir)
    assert set(events.Tags()["scalars"]) == {"train/loss", "acc"}
    loss = events.Scalars("train/loss")
    assert [e.step for e in loss] == [0, 1, 2]
    assert [e.value for e in loss] == pytest.approx([1.0, 0.5, 1 / 3])
    assert [e.value for e in events.Scalars("acc")] == pytest.approx([0.0, 0.5, 1.0])


def test_hparams_go_to_the_hparams_tab_with_hp_metric_and_to_yaml(tmp_path):
    """As Lightning's: the HPARAMS plugin's session (values TensorBoard cannot show as text), the
    ``hp_metric`` scalar at -1, and hparams.yaml."""
    from tensorboard.plugins.hparams import plugin_data_pb2

    logger = TensorBoardLogger(tmp_path, name="exp", version=3)
    logger.log_hyperparams({"lr": 0.01, "act": torch.nn.Tanh(), "opt": {"name": "sgd"}})
    logger.finalize("success")

    with open(os.path.join(logger.log_dir, "hparams.yaml")) as file:  # Lightning's yaml.dump, Python tags and all
        saved = yaml.unsafe_load(file)
    assert isinstance(saved.pop("act"), torch.nn.Tanh) and saved == {"lr": 0.01, "opt": {"name": "sgd"}}
    events = load_events(logger.log_dir)
    assert [(e.step, e.value) for e in events.Scalars("hp_metric")] == [(0, -1.0)]
    content = events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    session = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info.hparams
    assert session["lr"].number_value == 0.01
    assert session["act"].string_value == "Tanh()" and session["opt/name"].string_value == "sgd"


def test_versions_increment(tmp_path):
    first = TensorBoardLogger(tmp_path)
    first.log_metrics({"x": 1.0}, step=0)
    first.finalize("success")
    second = TensorBoardLogger(tmp_path)
    assert second.version == 1


def test_pickles_without_its_writer(tmp_path):
    logger = TensorBoardLogger(tmp_path)
    logger.log_metrics({"x": 1.0}, step=0)
    clone = pickle.loads(pickle.dumps(logger))
    assert clone.log_dir == logger.log_dir and clone._writer is None
    logger.finalize("success")


def test_missing_tensorboard_raises_at_construction(tmp_path, monkeypatch):
    # None in sys.modules: neither package can be found (nor imported)
    for name in ("tensorboard", "tensorboardX"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ImportError, match=r'pip install "trainmesh\[tensorboard\]"'):
        TensorBoardLogger(tmp_path)


def test_tensorboardx_writes_where_tensorboard_is_missing(tmp_path, monkeypatch):
    # Lightning's TensorBoardLogger falls back to tensorboardX's SummaryWriter: so does this one.
    written = []

    class SummaryWriter:
        def __init__(self, log_dir, **kwargs):
            written.append(("open", log_dir, kwargs))

        def add_scalar(self, key, value, global_step):
            written.append((key, value, global_step))

    fake = types.ModuleType("tensorboardX")
    fake.__spec__ = importlib.machinery.ModuleSpec("tensorboardX", None)
    fake.SummaryWriter = SummaryWriter
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    monkeypatch.setitem(sys.modules, "tensorboardX", fake)
    logger = TensorBoardLogger(tmp_path, flush_secs=5)
    logger.log_metrics({"loss": torch.tensor(0.5)}, step=3)
    assert written == [("open", logger.log_dir, {"flush_secs": 5}), ("loss", 0.5, 3)]


def test_module_imports_without_tensorboard(tmp_path, monkeypatch):
    # Load a fresh copy of the module while tensorboard cannot be imported: importing must
    # work (tensorboard is optional), constructing must fail with the install hint.
    for name in ("tensorboard", "tensorboardX", "torch.utils.tensorboard"):
        monkeypatch.setitem(sys.modules, name, None)
    path = trainmesh.loggers.tensorboard.__file__
    spec = importlib.util.spec_from_file_location("fresh_tensorboard_logger", path)
    fresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh)
    with pytest.raises(ImportError, match="trainmesh\\[tensorboard\\]"):
        fresh.TensorBoardLogger(tmp_path)
