"""Lightning's ``lightning.pytorch.overrides`` package: the wrappers its Trainer puts around a user's
objects (see overrides/distributed.py)."""
