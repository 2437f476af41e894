"""Fabric's collective objects (``lightning.fabric.plugins.collectives``) beside Lightning Fabric 2.6's: the same
calls give the same tensors and objects, on one device and on a one-process gloo group each forms and tears down."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist

pytest.importorskip("lightning.fabric")


def _calls(collective, *, group: bool) -> list:
    t = torch.arange(4.0)
    answers = [
        collective.rank,
        collective.world_size,
        collective.broadcast(t.clone(), 0),
        collective.all_reduce(t.clone(), "sum"),
        collective.all_reduce(t.clone(), "max"),
        collective.reduce(t.clone(), 0, "sum"),
        collective.all_gather([torch.zeros(4)], t.clone()),
        collective.scatter(torch.zeros(2), [torch.tensor([5.0, 6.0])], 0),
        collective.all_to_all([torch.zeros(4)], [t.clone()]),
    ]
    collective.barrier()
    if group:  # torch's calls that only a process group has
        answers += [
            collective.gather(t.clone(), [torch.zeros(4)], 0),
            collective.reduce_scatter(torch.zeros(4), [t.clone()], "sum"),
            collective.all_gather_object([None], {"a": 1}),
            collective.broadcast_object_list(["x"], 0),
            collective.gather_object(3, [None], 0),
            collective.scatter_object_list([None], ["s"], 0),
        ]
        with pytest.raises(ValueError, match="is not a member of `ReduceOp`"):
            collective.all_reduce(t.clone(), "nope")
    return answers


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def test_single_device_collective_answers_as_fabric_s():
    from lightning.fabric.plugins.collectives import Collective as TheirBase
    from lightning.fabric.plugins.collectives import SingleDeviceCollective as Theirs

    from trainmesh.fabric.plugins.collectives import Collective as OurBase
    from trainmesh.fabric.plugins.collectives import SingleDeviceCollective as Ours

    assert issubclass(Theirs, TheirBase) and issubclass(Ours, OurBase)
    for base in (TheirBase, OurBase):
        with pytest.raises(TypeError, match="abstract"):
            base()

    theirs, ours = _calls(Theirs(), group=False), _calls(Ours(), group=False)
    assert _same(theirs, ours) and ours[:2] == [0, 1]
    t = torch.arange(3.0)
    for collective in (Theirs(), Ours()):
        assert collective.gather(t, [])[0] is t and collective.reduce_scatter(t, [t + 1])[0] == 1
        assert collective.setup().create_group().teardown() is collective
        with pytest.raises(RuntimeError, match="does not own a group"):
            _ = collective.group


def test_torch_collective_forms_answers_and_tears_down_its_group_as_fabric_s(monkeypatch):
    from lightning.fabric.plugins.collectives import TorchCollective as Theirs

    from trainmesh.fabric.plugins.collectives import TorchCollective as Ours
    from trainmesh.launchers.environments import find_free_port

    if dist.is_initialized():
        pytest.skip("this process already has a default group: the collective would not form its own")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    answers = []
    for cls in (Theirs, Ours):
        collective = cls().setup(
            main_address="127.0.0.1", main_port=str(find_free_port()), backend="gloo", rank=0, world_size=1
        )
        assert "MASTER_ADDR" not in os.environ and cls.manages_default_group
        answers.append(_calls(collective, group=True))
        subgroup = cls().create_group(ranks=[0])
        states = [subgroup.world_size]
        # the last group but the default one goes: the default group, formed by setup, goes with it
        subgroup.teardown()
        states += [dist.is_initialized(), cls.manages_default_group]
        answers[-1].append(states)
    assert _same(answers[0], answers[1]), answers
    assert answers[1][-1] == [1, False, False]
