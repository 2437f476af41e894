"""The package's version, in a module of its own so that code inside the package reads it without
importing the package's face (``trainmesh/__init__``, which imports the Trainer and everything under it)."""

__version__ = "0.1.0"

# The Lightning release whose API and checkpoint layout trainmesh follows: written as a checkpoint's
# ``pytorch-lightning_version``, which Lightning's ``load_from_checkpoint`` and ``fit(ckpt_path=)`` need.
LIGHTNING_API_VERSION = "2.6.6"
