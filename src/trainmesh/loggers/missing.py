"""Lightning's loggers over services whose packages are not installed here (Comet, Neptune, Lightning's
LitLogger): the names exist, and using one stops as Lightning stops without the package, naming the
``pip install``. With the package installed, trainmesh still has no writer for it: refused, saying so."""

from __future__ import annotations

import importlib.util
from typing import Any

from trainmesh.utilities.refusal import RefusedError


def _logger_needing(name: str, module: str, missing: str) -> type:
    reason = f"trainmesh has no {name} yet; use MLFlowLogger, WandbLogger, TensorBoardLogger or CSVLogger"

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if importlib.util.find_spec(module) is None:
            raise ModuleNotFoundError(missing)
        raise RefusedError(f"{name}: {reason}")

    return type(name, (), {"__init__": __init__, "__refused__": reason, "__module__": __name__})


CometLogger = _logger_needing(
    "CometLogger",
    "comet_ml",
    "Requirement 'comet-ml>=3.44.4' not met. HINT: Try running `pip install -U 'comet-ml>=3.44.4'`",
)
NeptuneLogger = _logger_needing(
    "NeptuneLogger", "neptune", "Requirement 'neptune' not met. HINT: Try running `pip install -U 'neptune'`"
)
LitLogger = _logger_needing("LitLogger", "litlogger", "No module named 'litlogger'")
