"""The ``trainmesh`` command line (``trainmesh fit|validate|test|predict``); see :mod:`trainmesh.cli.main`."""
