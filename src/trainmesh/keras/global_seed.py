"""Keras' global seed generator, carried with torch's, numpy's and Python's generators.

A ``keras.random`` draw given no seed (``keras.random.normal(shape)`` in a layer's ``call`` or a
``train_step``) draws from Keras' global ``SeedGenerator``, which Keras makes at the first such draw
(its seed from Python's generator) and keeps outside any model. A spawned worker has none: where the
program drew before ``fit``, the worker made another from its own seed and trained 1.25e-2 apart from
one process (2 x 16 against 32, 2 epochs), silently; and after any multi-process ``fit`` the launching
process's next unseeded draw was not one process's (its generator had not moved). So its state goes to
the workers and comes back with the other generators (arguments.random_states), and a preempted run
resumes it too. None: no global generator yet (one is made where one process would make it).
"""

from __future__ import annotations

from typing import Any

import numpy as np

GLOBAL_SEED_GENERATOR = "global_seed_generator"  # Keras' key in its global state


def state() -> np.ndarray | None:
    """The global seed generator's state, None when Keras has made none."""
    from keras.src.backend.common import global_state

    generator = global_state.get_global_attribute(GLOBAL_SEED_GENERATOR)
    return None if generator is None else np.array(generator.state.numpy())


def set_state(value: Any) -> None:
    """Keras' global seed generator at ``value`` (made if there is none; None: none, as Keras starts)."""
    from keras.src.backend.common import global_state
    from keras.src.random.seed_generator import SeedGenerator

    if value is None:
        global_state.set_global_attribute(GLOBAL_SEED_GENERATOR, None)
        return
    generator = global_state.get_global_attribute(GLOBAL_SEED_GENERATOR)
    if generator is None:
        generator = SeedGenerator(seed=0)  # an int seed: Python's generator is not drawn from
        generator._initial_seed = None  # as Keras makes it (no seed given)
        global_state.set_global_attribute(GLOBAL_SEED_GENERATOR, generator)
    generator.state.assign(value)
