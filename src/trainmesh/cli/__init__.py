"""The ``trainmesh`` command line (``trainmesh fit|validate|test|predict``); see :mod:`trainmesh.cli.main`.

``CLI(Model, DataModule)`` gives a user's own script the same command line.
"""

from trainmesh.cli.cli_class import CLI

__all__ = ["CLI"]
