"""AsyncCheckpointIO on its own: what it writes in the background is the state as it was when the
save was asked for (training may change the live tensors at once), one save at a time, deletions
after the save they follow, errors raised by the next save or the wait."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import torch

import trainmesh.checkpoint.writers as writers
from trainmesh.checkpoint import AsyncCheckpointIO, atomic_save, load_checkpoint_file, remove_checkpoint


def live_state() -> dict[str, Any]:
    """A checkpoint-like dict: a model's tensors, Adam's state, nested plain values."""
    torch.manual_seed(0)
    model = torch.nn.Linear(32, 16)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 32)).sum().backward()
    optimizer.step()
    return {
        "state_dict": model.state_dict(),
        "optimizer_states": [optimizer.state_dict()],
        "global_step": 7,
        "loop": {"batches_done": 3, "outputs": [1, 2]},
    }


def train_on(state: dict[str, Any]) -> None:
    """What the training steps after a save do to the live state: change it in place."""
    for tensor in state["state_dict"].values():
        tensor.add_(1.0)
    for entry in state["optimizer_states"][0]["state"].values():
        entry["exp_avg"].mul_(-3.0)
    state["loop"]["outputs"].append(3)
    state["loop"]["batches_done"] = 4


class Gate:
    """Holds the background write until ``open()``: the test decides what happens meanwhile."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, fail: bool = False) -> None:
        self.event, self.fail, self.calls = threading.Event(), fail, 0
        real = writers.atomic_save

        def gated(obj: Any, path: Any) -> Path:
            self.calls += 1
            assert self.event.wait(60), "the test never opened the gate"
            if self.fail:
                raise OSError(28, "No space left on device (injected)")
            return real(obj, path)

        monkeypatch.setattr(writers, "atomic_save", gated)

    def open(self) -> None:
        self.event.set()


def test_the_background_save_writes_the_bytes_a_synchronous_save_of_the_same_state_writes(tmp_path, monkeypatch):
    state = live_state()
    atomic_save(state, tmp_path / "sync.ckpt")
    gate = Gate(monkeypatch)
    writer = AsyncCheckpointIO()
    writer.open()
    writer.write_file(state, str(tmp_path / "async.ckpt"))
    assert writer.in_flight and gate.calls <= 1 and not (tmp_path / "async.ckpt").exists()
    train_on(state)  # while the save is in flight: the staged copy must not see it
    gate.open()
    writer.close()
    assert (tmp_path / "async.ckpt").read_bytes() == (tmp_path / "sync.ckpt").read_bytes()
    loaded = load_checkpoint_file(tmp_path / "async.ckpt")
    assert loaded["loop"] == {"batches_done": 3, "outputs": [1, 2]}
    assert not torch.equal(loaded["state_dict"]["weight"], state["state_dict"]["weight"])  # the live one moved on


def test_a_second_save_stages_again_after_the_first_is_written(tmp_path, monkeypatch):
    """The staging buffers are reused from one save to the next: each file still holds its own state."""
    state = live_state()
    expected = []
    writer = AsyncCheckpointIO()
    writer.open()
    for step in range(3):
        expected.append(state["state_dict"]["weight"].clone())
        writer.write_file(state, str(tmp_path / f"step{step}.ckpt"))  # waits for the one before
        train_on(state)
    writer.close()
    for step, weight in enumerate(expected):
        assert torch.equal(load_checkpoint_file(tmp_path / f"step{step}.ckpt")["state_dict"]["weight"], weight)


def test_the_older_checkpoint_is_deleted_only_once_the_new_one_is_complete(tmp_path, monkeypatch):
    old, new = tmp_path / "epoch=0.ckpt", tmp_path / "epoch=1.ckpt"
    atomic_save({"step": 0}, old)
    gate = Gate(monkeypatch)
    writer = AsyncCheckpointIO()
    writer.open()
    writer.write_file({"step": 1}, str(new))
    writer.after_save(lambda: remove_checkpoint(old))
    assert old.exists() and not new.exists()  # a kill now leaves the older one
    gate.open()
    writer.wait()
    assert not old.exists() and load_checkpoint_file(new)["step"] == 1
    writer.after_save(lambda: remove_checkpoint(new))  # nothing in flight: at once
    assert not new.exists()
    writer.close()


def test_a_failed_background_save_keeps_the_older_file_and_is_raised_by_the_next_save(tmp_path, monkeypatch):
    old, new = tmp_path / "epoch=0.ckpt", tmp_path / "epoch=1.ckpt"
    atomic_save({"step": 0}, old)
    gate = Gate(monkeypatch, fail=True)
    writer = AsyncCheckpointIO()
    writer.open()
    writer.write_file({"step": 1}, str(new))
    writer.after_save(lambda: remove_checkpoint(old))
    gate.open()
    with pytest.raises(OSError, match="No space left") as raised:
        writer.write_file({"step": 2}, str(tmp_path / "epoch=2.ckpt"))  # the next save reports it
    assert any(f"background save of {new}" in note for note in getattr(raised.value, "__notes__", [str(new)]))
    assert old.exists() and not new.exists() and not (tmp_path / "epoch=2.ckpt").exists()
    writer.wait()  # reported once
    writer.close()


def test_outside_fit_a_save_is_written_before_it_returns(tmp_path):
    writer = AsyncCheckpointIO()  # not opened: as after fit
    writer.write_file({"step": 1}, str(tmp_path / "after.ckpt"))
    assert not writer.in_flight and load_checkpoint_file(tmp_path / "after.ckpt")["step"] == 1


def test_another_checkpoint_io_is_refused():
    with pytest.raises(ValueError, match="takes no other CheckpointIO"):
        AsyncCheckpointIO(checkpoint_io=object())


@pytest.mark.parametrize("ahead", [True, False])
def test_the_staging_memory_is_allocated_in_the_background_before_the_first_save(ahead, tmp_path, monkeypatch):
    # Allocating (first-touching) a checkpoint's worth of host memory made the first save of a fit
    # stall training ~4x longer than the later ones, which refill it. Which thread allocates each
    # staging storage (a miss of DCP's stager cache, torch's own internals) tells where it happened.
    from torch.distributed.checkpoint._state_dict_stager import StateDictStager

    allocated_by: list[str] = []
    real = StateDictStager._stage_untyped_storage

    def watched(self: Any, storage: Any, non_blocking: bool = False) -> Any:
        if storage not in self._cached_storage_mapping:
            allocated_by.append(threading.current_thread().name)
        return real(self, storage, non_blocking=non_blocking)

    monkeypatch.setattr(StateDictStager, "_stage_untyped_storage", watched)
    torch.manual_seed(0)
    model = torch.nn.Linear(32, 16)
    optimizer = torch.optim.Adam(model.parameters())
    writer = AsyncCheckpointIO()
    writer.open(model, [optimizer]) if ahead else writer.open()
    for _ in range(2):  # Adam's state exists after its first step: allocated then, in the background
        model(torch.randn(4, 32)).sum().backward()
        optimizer.step()
    checkpoint = {"state_dict": model.state_dict(), "optimizer_states": [optimizer.state_dict()]}
    writer.write_file(checkpoint, str(tmp_path / "a.ckpt"))
    writer.close()
    on_training_thread = [name for name in allocated_by if not name.startswith("trainmesh-checkpoint")]
    # The weight, the bias, and Adam's two moments and step count of each.
    assert len(allocated_by) == 8
    assert len(on_training_thread) == (0 if ahead else 8)
    saved = load_checkpoint_file(tmp_path / "a.ckpt")
    for name, value in model.state_dict().items():
        assert torch.equal(saved["state_dict"][name], value)


def test_the_group_of_the_background_sharded_saves_is_destroyed_when_the_writer_closes(tmp_path, monkeypatch):
    # Each fit's background sharded saves made a gloo group (3 threads, 5 fds) that outlived the
    # fit: a loop of fits with AsyncCheckpointIO piled them up in one process group.
    import torch.distributed as dist

    groups = []
    monkeypatch.setattr(writers, "_save_distributed", lambda state, path, **options: groups.append(options))
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        writer = AsyncCheckpointIO()
        for fit in range(2):
            writer.open()
            writer.write_distributed(live_state(), str(tmp_path / f"fit{fit}"), rank=0, sharded_keys=())
            writer.close()
            assert groups[fit]["process_group"] not in dist.distributed_c10d._world.pg_map
        assert len(dist.distributed_c10d._world.pg_map) == 1  # the default group alone
    finally:
        dist.destroy_process_group()
