"""What both start-up scripts share: the phase marks benchmarks/startup.py reads, and the data.

Tiny and torch-free at import, so importing it before the first mark costs nothing measurable.
"""

import os
import time

_MARKS = os.environ.get("STARTUP_MARKS")
STEPS, BATCH, SAMPLES = int(os.environ.get("STARTUP_STEPS", "30")), 16, 4096


def mark(phase: str) -> None:
    """Append "<rank> <phase> <time.time()>" to the file STARTUP_MARKS names (rank "agent" in
    the process that launches the workers)."""
    if _MARKS:
        with open(_MARKS, "a") as file:
            file.write(f"{os.environ.get('RANK', 'agent')} {phase} {time.time()}\n")


def generated_data():
    """The same SAMPLES x 784 inputs and 10-class labels in every process (seeded)."""
    import torch

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, 784, generator=generator)
    return x, (x @ torch.randn(784, 10, generator=generator)).argmax(dim=1)
