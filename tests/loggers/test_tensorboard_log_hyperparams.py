"""TensorBoardLogger.log_hyperparams called by a program, as Lightning 2.6's (its own tests
test_tensorboard.py::test_tensorboard_log_hyperparams, ::test_tensorboard_named_version): what the
HPARAMS tab holds (tensors and arrays of more than one dimension as text, a 1-d tensor's first
element, a list of mappings and a data class opened into ``name/0/key``), and ``hparams.yaml``
written by ``save()`` where it is not yet there, not by ``log_hyperparams`` (was: rewritten at each
call, which raised on keys omegaconf refuses, ``5j``, and a later call changed a file Lightning's
leaves as first saved); ``log_graph``'s warnings in Lightning's words (::test_tensorboard_log_graph_warning_no_example_input_array)."""

from __future__ import annotations

import dataclasses
import os
from argparse import Namespace

import numpy as np
import pytest
import torch

pytest.importorskip("tensorboard")


@dataclasses.dataclass
class _Optim:
    name: str = "sgd"
    lr: float = 0.1


def _tab(log_dir: str) -> dict[str, object]:
    """The HPARAMS tab's values as first logged in ``log_dir``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    accumulator = EventAccumulator(log_dir)
    accumulator.Reload()
    tab: dict[str, object] = {}
    for data in accumulator.PluginTagToContent("hparams").values():
        plugin = HParamsPluginData.FromString(data)
        if plugin.HasField("session_start_info"):
            for key, value in plugin.session_start_info.hparams.items():
                tab[key] = getattr(value, value.WhichOneof("kind"))
    return tab


def _logged(framework, root: str) -> tuple[list[str], dict[str, object], list[str]]:
    logger = framework.loggers.TensorBoardLogger(root, name="tb")
    logger.log_hyperparams({"a": 1, 123: 3, 3.5: 4, 5j: 5})  # keys omegaconf refuses: no file yet
    files = sorted(name.split(".")[0] for name in os.listdir(logger.log_dir))
    logger._hparams.clear() if hasattr(logger, "_hparams") else logger.hparams.clear()  # the file saved below
    params = {
        "tensor": torch.ones(2, 2, 2),
        "vector": torch.tensor([4.0, 5.0]),
        "array": np.ones([2, 3]),
        "scalar": np.float32(1.5),
        "loaders": [{"a": 1}, {"b": Namespace(c=2)}],
        "optim": _Optim(),
        "list": [1, 2],
    }
    logger.log_hyperparams(params)
    logger.save()
    logger.log_hyperparams({"later": 7})  # Lightning's file keeps what the first save wrote
    logger.save()
    tab = _tab(logger.log_dir)
    with open(os.path.join(logger.log_dir, "hparams.yaml")) as file:  # its keys (a tensor's text holds ids)
        return files, tab, [line for line in file.read().splitlines() if line[:1] not in (" ", "-")]


def test_log_hyperparams_writes_what_lightning_s_writes(tmp_path) -> None:
    lightning = pytest.importorskip("lightning.pytorch")
    import trainmesh

    expected = _logged(lightning, str(tmp_path / "lightning"))
    assert expected[0] == ["events"] and "later: 7" not in expected[2] and "list:" in expected[2]
    assert _logged(trainmesh, str(tmp_path / "trainmesh")) == expected


def _numbers_logged(framework, root: str) -> tuple[dict[str, object], str]:
    """The tab of numpy numbers and a 0-dim array; the error a 0-dim tensor raises."""
    logger = framework.loggers.TensorBoardLogger(root)
    logger.log_hyperparams({"count": np.int64(3), "flag": np.bool_(True), "zero_dim_array": np.array(2.0)})
    logger.experiment.flush()
    with pytest.raises(IndexError) as raised:
        logger.log_hyperparams({"temperature": torch.tensor(3.0)})
    return _tab(logger.log_dir), str(raised.value)


def test_numbers_and_a_zero_dim_tensor_as_lightning_s(tmp_path) -> None:
    """A 0-dim array is text, numpy numbers their value; Lightning hands a 0-dim tensor to TensorBoard,
    which raises IndexError (in a fit: after on_fit_start, before training). Before: trainmesh logged
    the array's and the tensor's numbers."""
    lightning = pytest.importorskip("lightning.pytorch")
    import trainmesh

    tab, error = _numbers_logged(lightning, str(tmp_path / "lightning"))
    assert tab == {"count": 3.0, "flag": True, "zero_dim_array": "2.0"}
    ours = _numbers_logged(trainmesh, str(tmp_path / "trainmesh"))
    assert ours[0] == tab and ours[1].startswith(error)


def _graph_warnings(framework, root: str) -> list[str]:
    import warnings

    class Model(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(3, 1)

    logger = framework.loggers.TensorBoardLogger(root, log_graph=True)
    said = []
    for example in (None, [torch.zeros(1, 3)]):  # none given; a list, which tracing does not take
        model = Model()
        model.example_input_array = example
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            logger.log_graph(model)
        said += [str(w.message) for w in caught if "computational graph" in str(w.message)]
    return said


def test_log_graph_warns_in_lightning_s_words(tmp_path) -> None:
    lightning = pytest.importorskip("lightning.pytorch")
    import trainmesh

    expected = _graph_warnings(lightning, str(tmp_path / "lightning"))
    assert len(expected) == 2
    assert _graph_warnings(trainmesh, str(tmp_path / "trainmesh")) == expected
