"""``lightning.fabric.connector``: Fabric's module that reads the constructor's arguments; trainmesh's reading is
``trainmesh.fabric.arguments``. Programs import ``_is_using_cli`` from here to ask whether the ``fabric run``
command line started them (it sets ``LT_CLI_USED=1``)."""

from __future__ import annotations

import os


def _is_using_cli() -> bool:
    """Whether the process was started by ``fabric run`` (``LT_CLI_USED`` set to a non-zero integer), as Fabric's."""
    return bool(int(os.environ.get("LT_CLI_USED", "0")))
