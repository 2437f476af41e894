"""``python -m trainmesh``: the same command line as the ``trainmesh`` console script."""

from trainmesh.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
