"""Finding Keras, and checking that it runs on its torch backend.

Keras is optional: ``import trainmesh`` never imports it, and ``import trainmesh.keras`` imports
it only when a function needs it, through :func:`require_keras`, which turns the three ways it
can be missing or unusable into errors that say what to do.
"""

from __future__ import annotations

import os
from typing import Any

from trainmesh.utilities.install_hints import install_hint

_INSTALL = f"`{install_hint('keras')}`"
_SET_BACKEND = (
    "set KERAS_BACKEND=torch before keras is first imported (in the shell: `export KERAS_BACKEND=torch`; "
    "in Python: os.environ['KERAS_BACKEND'] = 'torch' as the first lines of the script, before `import keras`)"
)


def require_keras() -> Any:
    """The ``keras`` module, checked to be Keras 3 on the torch backend."""
    try:
        import keras
    except ModuleNotFoundError as exc:
        if exc.name == "keras":
            raise ImportError(f"trainmesh.keras needs Keras 3, which is not installed: {_INSTALL}") from exc
        # keras is there but its backend's library is not (tensorflow, jax): the backend is not torch.
        backend = os.environ.get("KERAS_BACKEND", "tensorflow (Keras' default)")
        raise ImportError(
            f"keras could not start its {backend!r} backend ({exc}); trainmesh trains Keras models on "
            f"the torch backend: {_SET_BACKEND}"
        ) from exc
    backend = keras.backend.backend()
    if backend != "torch":
        raise RuntimeError(
            f"keras runs on the {backend!r} backend, but trainmesh trains Keras models as torch modules, "
            f"which needs the torch backend: {_SET_BACKEND}. A backend cannot change once keras is imported"
        )
    return keras


def is_keras_object(obj: Any) -> bool:
    """Whether ``obj`` is an instance of a Keras class (without importing keras when it is not loaded)."""
    return any(cls.__module__.split(".")[0] == "keras" for cls in type(obj).__mro__)
