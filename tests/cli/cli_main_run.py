"""``python -m trainmesh ARGS`` as a program that helpers/forked.py can fork (it runs a program by
its path): the same ``main`` on the same command line."""

from trainmesh.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
