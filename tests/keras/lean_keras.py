"""Imported first by the Keras test programs, before keras: Keras without two packages they never use.

Keras imports scikit-learn (for ``keras.wrappers``) and matplotlib (for ``keras.visualization``) when they
are installed, and goes on without them when they are not (each import sits in a ``try/except
ImportError``). Marking them absent (``sys.modules[name] = None``: ``import name`` raises ImportError)
takes a program's start from about 5.3 to 3.8 CPU-s, and the Keras tests start some forty processes.

Only in a program's own process (``__main__``, or ``__mp_main__`` in a spawned worker): pytest's process,
which imports these modules for its one-process references, keeps every package for the tests after.
"""

import os
import sys

os.environ["KERAS_BACKEND"] = "torch"  # before keras is imported, here and in spawned workers
UNUSED = ("sklearn", "matplotlib")


def leave_out_unused_packages(module_name: str) -> None:
    """In a program's process (``module_name`` is its ``__name__``): the unused packages marked absent."""
    if module_name in ("__main__", "__mp_main__"):
        for name in UNUSED:
            sys.modules.setdefault(name, None)  # type: ignore[arg-type]
