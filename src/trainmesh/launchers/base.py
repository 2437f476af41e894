from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class ProcessInfo:
    """Where this process sits among all the run's processes."""

    global_rank: int = 0
    local_rank: int = 0
    node_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    # Where rank 0 listens for the process group's rendezvous.
    master_addr: str = "127.0.0.1"
    master_port: int = 0
    # Set in processes whose launcher sends rank 0's results back to a waiting parent (spawn).
    reports_to_parent: bool = False

    @property
    def is_global_zero(self) -> bool:
        return self.global_rank == 0


@dataclass(frozen=True)
class ProcessPlan:
    """How a strategy's processes start: what its launcher is built from."""

    start_method: str  # "in_process", "elastic", "spawn", "fork"
    per_node: int  # processes on each node
    # Variables the workers need from their start (torch reads some once, at its first tensor):
    # the launcher sets them where it starts the workers; a value already set stands.
    environment: Mapping[str, str] = field(default_factory=dict)


class Launcher(Protocol):
    """Starts the processes of a run and calls ``fn`` in each one.

    ``launch`` returns what ``fn`` returned in this process (rank 0's result for launchers that
    bring results back to a parent process).
    """

    def launch(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any: ...

    def process_info(self) -> ProcessInfo:
        """This process's place in the run, valid inside ``fn``."""
        ...

    def planned_process(self) -> ProcessInfo:
        """This process's place as far as it is known before ``launch`` sets the run up."""
        ...
