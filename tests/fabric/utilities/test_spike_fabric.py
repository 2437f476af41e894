"""Fabric's ``SpikeDetection`` beside Lightning Fabric 2.6's: the same losses raise at the same batch with the same
message, write the same ``skip_batches.json`` and leave the same state."""

from __future__ import annotations

import json

import pytest

LOSSES = [1.0, 0.9, 0.95, 0.8, 0.85, 3.5, 0.7]  # a spike at batch 5
NON_FINITE = [1.0, 0.9, float("nan"), 0.8, 0.7]


def _run(fabric_class, detector_class, losses, folder, **kwargs):
    import torch

    fabric = fabric_class(accelerator="cpu", devices=1)
    detector = detector_class(window=3, exclude_batches_path=folder, **kwargs)
    raised = None
    for batch_idx, loss in enumerate(losses):
        try:
            detector.on_train_batch_end(fabric, torch.tensor(loss), None, batch_idx)
        except RuntimeError as error:
            raised = (type(error).__name__, str(error))
            break
    written = folder / "skip_batches.json"
    state = detector.state_dict()
    state.pop("bad_batches_path")
    state["running"] = {k: v.tolist() if hasattr(v, "tolist") else v for k, v in state["running"].items()}
    state["mean"] = {k: v.tolist() if hasattr(v, "tolist") else v for k, v in state["mean"].items()}
    return raised, json.loads(written.read_text()) if written.exists() else None, state


@pytest.mark.parametrize(
    ("losses", "kwargs", "spike_at"),
    [
        (LOSSES, {}, 5),
        (LOSSES, {"rtol": None, "atol": 5.0}, None),
        (NON_FINITE, {}, 2),
        (NON_FINITE, {"finite_only": False}, None),
    ],
)
def test_spike_detection_is_fabric_s(tmp_path, losses, kwargs, spike_at):
    import lightning.fabric
    from lightning.fabric.utilities.spike import SpikeDetection as Theirs

    import trainmesh.fabric
    from trainmesh.fabric.utilities.spike import SpikeDetection as Ours

    theirs = _run(lightning.fabric.Fabric, Theirs, losses, tmp_path / "theirs", **kwargs)
    ours = _run(trainmesh.fabric.Fabric, Ours, losses, tmp_path / "ours", **kwargs)
    assert ours == theirs
    assert ours[0] == (
        None if spike_at is None else ("TrainingSpikeException", f"Training spike detected in batch {spike_at}")
    )


def test_lightning_s_callbacks_spike_names_fabric_s_detector():
    import lightning.fabric.utilities.spike
    import lightning.pytorch.callbacks.spike

    import trainmesh.callbacks.spike
    import trainmesh.fabric.utilities.spike

    assert lightning.pytorch.callbacks.spike.FabricSpikeDetection is lightning.fabric.utilities.spike.SpikeDetection
    assert trainmesh.callbacks.spike.FabricSpikeDetection is trainmesh.fabric.utilities.spike.SpikeDetection


def test_a_saved_detector_loads_where_lightning_fabric_s_raises(tmp_path):
    # a deliberate difference (docs/how-to/fabric.md): Fabric 2.6's load_state_dict reads into
    # self.running, which it never sets; trainmesh's restores the state its own state_dict wrote
    import lightning.fabric
    from lightning.fabric.utilities.spike import SpikeDetection as Theirs

    import trainmesh.fabric
    from trainmesh.fabric.utilities.spike import SpikeDetection as Ours

    *_, saved = _run(lightning.fabric.Fabric, Theirs, LOSSES[:4], tmp_path / "theirs")
    with pytest.raises(AttributeError, match="has no attribute 'running'"):
        Theirs().load_state_dict(Theirs().state_dict())
    trained = Ours(window=3, exclude_batches_path=tmp_path / "ours")
    for batch_idx, loss in enumerate(LOSSES[:4]):
        trained.on_train_batch_end(
            trainmesh.fabric.Fabric(accelerator="cpu", devices=1), _tensor(loss), None, batch_idx
        )
    restored = Ours()
    restored.load_state_dict(trained.state_dict())
    assert restored.state_dict()["running"].keys() == trained.state_dict()["running"].keys()
    assert str(restored.state_dict()) == str(trained.state_dict())
    assert restored.state_dict()["mean"].keys() == saved["mean"].keys()


def _tensor(value):
    import torch

    return torch.tensor(value)
