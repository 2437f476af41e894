"""A restart simulated inside the test's process: what a new process of the same program starts with."""

import pytest
import torch

from trainmesh.trainer import own_saves, run_identity


def as_restart_of(monkeypatch: pytest.MonkeyPatch, checkpoint, argv: list[str] | None = None) -> None:
    """The next fit of this process is the same fit, in a new process, of the program that wrote
    ``checkpoint`` (its record's fit number; ``argv``: that program's command line, where it was
    another script): no saves of its own yet."""
    saved = torch.load(checkpoint, map_location="cpu", weights_only=False, mmap=True)
    record = saved.get(run_identity.RUN_KEY) or {"fit": 1}  # none: written before runs were recorded
    monkeypatch.setattr(run_identity, "_fits", record["fit"] - 1)
    monkeypatch.setattr(own_saves, "_WRITTEN", set())
    if argv is not None:
        monkeypatch.setattr("sys.argv", argv)
