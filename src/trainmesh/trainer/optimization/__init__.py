"""The optimizer step: its one owner (owner.py: train, closure, zero_grad, step, schedulers, the
token-loss window, the step count) and the runners that call it per batch (runners.py: automatic,
manual; Lightning 1.x's turns and truncated BPTT are in ``trainer/lightning1/``)."""
