"""Distributed checkpoints store the pieces they are handed, under the caller's key names.

Single process, no process group: DCP runs with ``no_dist`` and every test takes well under a second.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

from trainmesh.checkpoint.distributed import (
    STATE_FILE,
    consolidate,
    inspect_distributed,
    load_distributed,
    save_distributed,
    templates_for,
)

# Single process by design: DCP says so on every save and load.
pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")


def build(seed: int) -> tuple[nn.Module, list[torch.optim.Optimizer]]:
    """A small model and two optimizers over different layers, each after one step (so they hold state)."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 2))
    optimizers = [
        torch.optim.SGD(model[0].parameters(), lr=0.1, momentum=0.9),
        torch.optim.Adam(model[2].parameters(), lr=0.01),
    ]
    model(torch.randn(8, 3)).pow(2).sum().backward()
    for optimizer in optimizers:
        optimizer.step()
    return model, optimizers


def pieces(model: nn.Module, optimizers: list[torch.optim.Optimizer]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    return get_model_state_dict(model), [get_optimizer_state_dict(model, o) for o in optimizers]


def assert_same(actual: Any, expected: Any, where: str = "") -> None:
    """Equal all the way down, tensors bit for bit (dict keys may be int or str, as DCP rebuilds them)."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor) and torch.equal(actual, expected), where
    elif isinstance(expected, dict):
        assert sorted(map(str, actual)) == sorted(map(str, expected)), where
        by_name = {str(k): v for k, v in actual.items()}
        for key, value in expected.items():
            assert_same(by_name[str(key)], value, f"{where}.{key}")
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), where
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, f"{where}[{i}]")
    else:
        assert actual == expected, where


@pytest.fixture
def saved(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """A checkpoint under key names the Trainer does not use, and what went into it."""
    model, optimizers = build(seed=0)
    weights, optimizer_states = pieces(model, optimizers)
    checkpoint = {
        "weights": weights,
        "optim": optimizer_states,
        "step": 7,
        "schedulers": [{"last_epoch": 3}],
        "notes": {"tag": "run-a"},
    }
    target = tmp_path / "run.ckpt"
    save_distributed(checkpoint, target, rank=0, sharded_keys=["weights", "optim"])
    return target, checkpoint


def fresh_templates(seed: int = 1) -> dict[str, Any]:
    model, optimizers = build(seed)
    return templates_for(model, optimizers, model_key="weights", optimizers_key="optim")


def test_sharded_pieces_come_back_under_their_own_keys(saved):
    target, checkpoint = saved
    assert (target / ".metadata").exists() and (target / STATE_FILE).exists()
    templates = fresh_templates()
    assert not torch.equal(templates["weights"]["0.weight"], checkpoint["weights"]["0.weight"])  # a real load
    loaded = load_distributed(target, templates)
    assert sorted(loaded) == sorted(checkpoint)  # the record itself is not an entry
    assert isinstance(loaded["optim"], list) and len(loaded["optim"]) == 2
    assert_same(loaded, checkpoint)


def test_consolidate_rebuilds_the_same_dict(saved, tmp_path):
    target, checkpoint = saved
    whole = torch.load(consolidate(target, tmp_path / "whole.pt"), weights_only=False)
    assert sorted(whole) == sorted(checkpoint)
    assert isinstance(whole["optim"], list)
    assert_same(whole, checkpoint)
    assert not list(tmp_path.glob(".*.tmp"))  # DCP's scratch file is gone


def test_a_list_the_checkpoint_holds_fewer_items_of_comes_back_with_those(tmp_path):
    model, optimizers = build(seed=0)
    weights, optimizer_states = pieces(model, optimizers[:1])
    save_distributed({"w": weights, "o": optimizer_states}, tmp_path / "c", rank=0, sharded_keys=("w", "o"))
    other, two = build(seed=1)
    loaded = load_distributed(tmp_path / "c", templates_for(other, two, model_key="w", optimizers_key="o"))
    assert_same(loaded["o"], optimizer_states)


def test_keys_the_checkpoint_lacks_are_left_out(tmp_path):
    model, _ = build(seed=0)
    save_distributed({"w": get_model_state_dict(model), "epoch": 2}, tmp_path / "c", rank=0, sharded_keys=["w", "o"])
    fresh, optimizers = build(seed=1)
    loaded = load_distributed(tmp_path / "c", templates_for(fresh, optimizers, model_key="w", optimizers_key="o"))
    assert sorted(loaded) == ["epoch", "w"]
    assert_same(loaded["w"], get_model_state_dict(model))


def test_an_empty_list_entry_comes_back_empty(tmp_path):
    model, _ = build(seed=0)
    save_distributed({"w": get_model_state_dict(model), "o": []}, tmp_path / "c", rank=0, sharded_keys=["w", "o"])
    fresh, optimizers = build(seed=1)
    loaded = load_distributed(tmp_path / "c", templates_for(fresh, optimizers, model_key="w", optimizers_key="o"))
    assert loaded["o"] == []
    assert torch.load(consolidate(tmp_path / "c", tmp_path / "whole.pt"), weights_only=False)["o"] == []


def test_a_template_for_another_model_names_the_difference(saved):
    other = nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 4))
    with pytest.raises(ValueError, match=r"2\.weight: checkpoint \(2, 5\) vs model \(4, 5\)"):
        load_distributed(saved[0], {"weights": get_model_state_dict(other)})


def test_a_template_of_the_wrong_form_is_refused(saved):
    with pytest.raises(ValueError, match="holds 'optim' as a list, but its template is dict"):
        load_distributed(saved[0], {"optim": {}})


def test_legacy_directory_without_a_record_still_loads_and_consolidates(tmp_path):
    import torch.distributed.checkpoint as dcp

    model, optimizers = build(seed=0)
    weights, optimizer_states = pieces(model, optimizers)
    legacy = tmp_path / "old.ckpt"
    # Exactly what the code before the record wrote: fixed DCP keys, optimizers keyed by int.
    dcp.save(
        {"model": weights, "optimizers": dict(enumerate(optimizer_states))}, checkpoint_id=str(legacy), no_dist=True
    )
    torch.save({"epoch": 4, "global_step": 40}, legacy / STATE_FILE)
    fresh, fresh_optimizers = build(seed=1)
    templates = templates_for(fresh, fresh_optimizers, model_key="state_dict", optimizers_key="optimizer_states")
    loaded = load_distributed(legacy, templates)
    assert_same(loaded, {"epoch": 4, "global_step": 40, "state_dict": weights, "optimizer_states": optimizer_states})
    whole = torch.load(consolidate(legacy, tmp_path / "whole.pt"), weights_only=False)
    assert_same(whole, {"epoch": 4, "global_step": 40, "state_dict": weights, "optimizer_states": optimizer_states})
    rest, shapes = inspect_distributed(legacy)
    assert rest == {"epoch": 4, "global_step": 40} and shapes["state_dict"]["2.weight"] == (2, 5)


@pytest.mark.parametrize("removed", [".metadata", STATE_FILE])
def test_an_incomplete_directory_names_what_is_missing(saved, tmp_path, removed):
    broken = tmp_path / "broken.ckpt"
    shutil.copytree(saved[0], broken)
    (broken / removed).unlink()
    message = "not a complete distributed checkpoint: " + re.escape(removed) + " missing"
    with pytest.raises(ValueError, match=message):
        load_distributed(broken, fresh_templates())
    with pytest.raises(ValueError, match=message):
        consolidate(broken, tmp_path / "whole.pt")


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ("weights", r"sharded_keys='weights' is one string; pass a sequence of keys"),
        (["a.b"], r"sharded key 'a\.b' cannot name a DCP entry"),
    ],
)
def test_unusable_sharded_keys_are_refused_before_anything_is_written(tmp_path, keys, message):
    with pytest.raises(ValueError, match=message):
        save_distributed({"weights": {}, "a.b": {}}, tmp_path / "c", rank=0, sharded_keys=keys)
    assert not list(tmp_path.iterdir())


def test_a_crash_while_saving_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    import torch.distributed.checkpoint as dcp

    target = tmp_path / "last.ckpt"
    model = nn.Linear(3, 3)
    save_distributed({"w": model.state_dict(), "epoch": 1}, target, rank=0, sharded_keys=["w"])

    def torn(*args: Any, **kwargs: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(dcp, "save", torn)
    with pytest.raises(OSError, match="disk full"):
        save_distributed({"w": nn.Linear(3, 3).state_dict(), "epoch": 2}, target, rank=0, sharded_keys=["w"])
    monkeypatch.undo()
    loaded = load_distributed(target, {"w": nn.Linear(3, 3).state_dict()})
    assert loaded["epoch"] == 1 and torch.equal(loaded["w"]["weight"], model.weight)
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]  # no half-written directory left


def test_cli_inspects_and_consolidates_a_trainer_directory(tmp_path, capsys):
    from trainmesh.cli.main import main

    model, optimizers = build(seed=0)
    weights, optimizer_states = pieces(model, optimizers)
    target = tmp_path / "trainer.ckpt"
    save_distributed(
        {"state_dict": weights, "optimizer_states": optimizer_states, "global_step": 9, "epoch": 1},
        target,
        rank=0,
        sharded_keys=["state_dict", "optimizer_states"],
    )
    assert main(["checkpoint", "inspect", str(target)]) == 0
    shown = capsys.readouterr().out
    assert "global step 9" in shown and "model: 4 tensors, 32 values" in shown and "2.weight: [2, 5]" in shown
    assert "other entries: ['epoch', 'global_step']" in shown  # no record, no sharded entries
    assert main(["checkpoint", "consolidate", str(target), str(tmp_path / "whole.pt")]) == 0
    whole = torch.load(tmp_path / "whole.pt", weights_only=False)
    assert_same(whole["state_dict"], weights)
    assert_same(whole["optimizer_states"], optimizer_states)


def test_a_template_naming_what_the_checkpoint_lacks_blames_the_mismatch_not_the_files(tmp_path):
    # torch's "Missing key in checkpoint state_dict" from intact files (an optimizer state under
    # another parameter name): before, UnreadableCheckpoint, "... copy the directory again".
    from trainmesh.checkpoint.formats import UnreadableCheckpoint

    model, optimizers = build(seed=0)
    weights, optimizer_states = pieces(model, optimizers)
    save_distributed({"w": weights, "o": optimizer_states}, tmp_path / "c", rank=0, sharded_keys=("w", "o"))
    templates = templates_for(model, optimizers, model_key="w", optimizers_key="o")
    state = templates["o"][1]["state"]
    state["head.weight"] = state.pop("2.weight")
    with pytest.raises(ValueError) as refused:
        load_distributed(tmp_path / "c", templates)
    assert not isinstance(refused.value, UnreadableCheckpoint)
    assert "holds no entry for this run's o.1.state.head.weight" in str(refused.value)
    assert "files are intact" in str(refused.value) and "saved from another model" in str(refused.value)
