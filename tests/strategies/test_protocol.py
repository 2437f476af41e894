"""Every named strategy implements the whole Strategy protocol, and the protocol stays small."""

import inspect

import pytest

from trainmesh.precision import Precision
from trainmesh.strategies import STRATEGIES
from trainmesh.strategies.protocol import Placement, Strategy


def protocol_members() -> set[str]:
    own = set(vars(Strategy)) | set(getattr(Strategy, "__annotations__", {}))
    return {name for name in own if not name.startswith("_")}


def test_the_protocol_has_about_20_members():
    members = protocol_members()
    assert "train_step" in members and "eval_step" in members and "mesh" in members
    # How the processes start (start method, processes per node, the workers' environment) is
    # one member, ``processes``: the launcher's input (issue 35 put the cap back from 24 to 22).
    assert len(members) <= 22, sorted(members)


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_every_strategy_has_every_protocol_member_with_its_signature(name):
    devices = (0,) if name == "single" else (0, 1)
    strategy = STRATEGIES[name](placement=Placement("cpu", devices, 1, Precision("32", device_type="cpu")))
    for member in protocol_members():
        assert hasattr(strategy, member), f"{name} lacks {member}"
        declared = getattr(Strategy, member, None)
        if inspect.isfunction(declared):
            wanted = [p.name for p in inspect.signature(declared).parameters.values()][1:]
            have = [p.name for p in inspect.signature(getattr(strategy, member)).parameters.values()]
            assert have == wanted, f"{name}.{member}{tuple(have)} differs from the protocol's {tuple(wanted)}"


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_a_strategy_placed_anew_keeps_its_options_and_takes_the_new_devices(name):
    cpu32 = Precision("32", device_type="cpu")
    devices = (0,) if name == "single" else (0, 1)
    first = STRATEGIES[name](placement=Placement("cpu", devices, 1, cpu32))
    again = first.with_placement(Placement("cpu", devices, 1, Precision("bf16-mixed", device_type="cpu")))
    assert type(again) is type(first) and again.name == first.name and again is not first
    assert again.start_method == first.start_method
    assert again.init_arguments == first.init_arguments
    assert again.precision.name == "bf16-mixed" and first.precision.name != "bf16-mixed"
