from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainmesh.launchers.base import ProcessInfo


class InProcessLauncher:
    """Runs ``fn`` right here: one process, or one of several started by torchrun or SLURM."""

    is_interactive_compatible = False  # Lightning's (its ddp launcher under torchrun: a script's)

    def __init__(self, process: ProcessInfo | None = None) -> None:
        self._process = process or ProcessInfo()

    def launch(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    def process_info(self) -> ProcessInfo:
        return self._process

    def planned_process(self) -> ProcessInfo:
        return self._process
