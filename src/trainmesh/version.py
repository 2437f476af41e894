"""The package's version, in a module of its own so that code inside the package reads it without
importing the package's face (``trainmesh/__init__``, which imports the Trainer and everything under it)."""

__version__ = "0.1.0"
