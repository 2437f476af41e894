"""Lightning 2.6's strategy signatures, read from the installed Lightning: every argument of its
``DDPStrategy``, ``FSDPStrategy`` and ``SingleDeviceStrategy`` is taken by trainmesh's class of that
name, or refused with the reason (strategies/lightning_arguments.py; test_lightning_arguments.py
checks each mapping and message, and the refusal of Lightning's model-parallel arguments)."""

import inspect

import pytest

from trainmesh.strategies import DDPStrategy, FSDPStrategy, SingleDeviceStrategy


def test_every_argument_of_lightnings_strategies_is_taken_or_refused_with_a_reason():
    """No argument of Lightning's is a TypeError: each is taken (its default) or refused with a ValueError."""
    strategies = pytest.importorskip("lightning.pytorch.strategies")
    ours = {"DDPStrategy": DDPStrategy, "FSDPStrategy": FSDPStrategy, "SingleDeviceStrategy": SingleDeviceStrategy}
    for name, build in ours.items():
        for parameter in inspect.signature(getattr(strategies, name)).parameters.values():
            if parameter.kind is inspect.Parameter.VAR_KEYWORD:
                continue
            value = parameter.default if parameter.default is not inspect.Parameter.empty else "cpu"
            try:
                build(**{parameter.name: value})
            except ValueError:
                pass  # refused with the reason (test_lightning_arguments.py checks the messages)
