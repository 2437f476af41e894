"""The Runtime in a hand-written loop (the keras-io seed's), one code path with the Trainer."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

import trainmesh as tm
from helpers.models import random_classification


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def test_runtime_loop_matches_plain_pytorch_bit_for_bit(tmp_path):
    loader = DataLoader(random_classification(), batch_size=8)
    runtime = tm.Runtime(accelerator="cpu", devices=1)

    def train():
        model = _net()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        model, optimizer = runtime.setup(model, optimizer)
        data = runtime.setup_dataloaders(loader)
        for x, y in data:
            optimizer.zero_grad()
            with runtime.autocast():
                loss = F.cross_entropy(model(x), y)
            runtime.backward(loss)
            runtime.clip_gradients(model, optimizer, max_norm=1.0)
            optimizer.step()
        runtime.save(str(tmp_path / "state.pt"), {"model": model, "optimizer": optimizer, "step": 12})
        return model

    trained = runtime.launch(train)
    reference = _net()
    optimizer = torch.optim.Adam(reference.parameters(), lr=1e-2)
    for x, y in loader:
        optimizer.zero_grad()
        F.cross_entropy(reference(x), y).backward()
        torch.nn.utils.clip_grad_norm_(reference.parameters(), 1.0)
        optimizer.step()
    for a, b in zip(trained.parameters(), reference.parameters()):
        assert torch.equal(a, b)

    fresh = _net()
    fresh_optimizer = torch.optim.Adam(fresh.parameters(), lr=1e-2)
    rest = runtime.load(str(tmp_path / "state.pt"), {"model": fresh, "optimizer": fresh_optimizer})
    assert rest == {"step": 12}
    for a, b in zip(fresh.parameters(), reference.parameters()):
        assert torch.equal(a, b)
    assert fresh_optimizer.state_dict()["state"][0]["step"] == optimizer.state_dict()["state"][0]["step"]


def test_runtime_collectives_on_one_process():
    runtime = tm.Runtime(accelerator="cpu")
    runtime.setup_environment()
    assert runtime.world_size == 1 and runtime.is_global_zero
    assert runtime.all_reduce(3.0) == 3.0
    assert runtime.all_gather(torch.ones(2)).shape == (1, 2)
    assert runtime.broadcast({"a": 1}) == {"a": 1}
    runtime.barrier()


def test_runtime_fp16_scaler_steps_through_the_wrapped_optimizer():
    runtime = tm.Runtime(accelerator="cpu", precision="16-mixed")
    net = _net()
    model, optimizer = runtime.setup(net, torch.optim.SGD(net.parameters(), lr=0.1))
    assert runtime.precision.scaler is not None
    x, y = random_classification(8).tensors
    with runtime.autocast():
        loss = F.cross_entropy(model(x), y)
    runtime.backward(loss)
    optimizer.step()
    assert runtime.precision.state_dict()["scaler"]["scale"] > 0


def test_runtime_load_reports_missing_entries(tmp_path):
    runtime = tm.Runtime(accelerator="cpu")
    runtime.save(str(tmp_path / "s.pt"), {"step": 1})
    with pytest.raises(KeyError, match="no entries \\['model'\\]"):
        runtime.load(str(tmp_path / "s.pt"), {"model": _net()})


# The Runtime's public names: what a user's own loop may call (README "Your own loop"). A new
# public member is a design decision, not a convenience: what only the Trainer uses is behind
# ``trainer_port`` (runtime_port.py: the choice by memory, ``loss_backward``, ...), and the Trainer's
# checkpoint writes behind ``checkpoints`` (runtime_checkpoints.py), so that the Runtime stays the
# small API a loop of one's own is written against. Change this set deliberately, with the README.
RUNTIME_PUBLIC_NAMES = {
    # processes and this process's place
    *("launch", "setup_environment", "teardown", "launcher", "process", "supervision"),
    *("global_rank", "local_rank", "node_rank", "world_size", "is_global_zero"),
    # the run's configuration, as chosen
    *("device", "device_type", "device_indices", "num_nodes", "precision", "seed_settings", "mesh"),
    *("strategy", "strategy_name", "strategy_choice", "capabilities"),
    # model, optimizers, data
    *("module_init_context", "setup", "setup_module", "setup_optimizers", "setup_dataloaders", "to_device"),
    # the step
    *("train_step", "eval_step", "autocast", "backward", "optimizer_step", "no_backward_sync"),
    *("clip_gradients", "normalize_gradients"),
    # collectives
    *("all_reduce", "all_gather", "all_gather_object", "broadcast", "broadcast_tensors", "barrier"),
    # checkpoints: one way (save/load), the state dicts they write, the whole model on rank 0
    *("save", "load", "state_dicts", "full_state_dict"),
    # the two services behind those verbs (issue 35): every save and restore, and the Trainer's door
    *("checkpoints", "trainer_port"),
}


def test_the_runtime_s_public_names_are_the_ones_a_loop_of_one_s_own_uses():
    runtime = tm.Runtime(accelerator="cpu", devices=1)
    public = {name for name in (*dir(type(runtime)), *vars(runtime)) if not name.startswith("_")}
    assert public == RUNTIME_PUBLIC_NAMES, (
        f"new: {sorted(public - RUNTIME_PUBLIC_NAMES)}, gone: {sorted(RUNTIME_PUBLIC_NAMES - public)}"
    )
