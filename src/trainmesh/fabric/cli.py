"""``lightning.fabric.cli``: Fabric's ``fabric run`` command line (``main``), which trainmesh does not provide: it
starts a script's processes with settings passed through the environment. Start the script yourself and let
``Fabric(strategy="ddp", devices=N).launch()`` start the processes, or use ``torchrun``."""

from __future__ import annotations

from typing import Any

from trainmesh.utilities.refusal import RefusedError

_REASON = (
    "the `fabric run` command line is not provided by trainmesh; run the script with python and let "
    "Fabric(accelerator=..., devices=N, strategy='ddp').launch() start the processes, or start it with torchrun"
)


def main(*args: Any, **kwargs: Any) -> None:
    """Fabric's ``fabric run``: refused, with the reason."""
    raise RefusedError(f"lightning.fabric.cli.main: {_REASON}")


main.__refused__ = _REASON  # type: ignore[attr-defined]
