"""``python -m trainmesh ARGS`` as a program that helpers/forked.py can fork (it runs a program by
its path): the same ``main`` on the same command line. A ``start_method="forkserver"`` strategy's
workers fork from a server that imported helpers/forked.py's PRELOAD once (torch, dynamo,
trainmesh), and this module's ``main``: not each a new interpreter importing them."""

import multiprocessing

from helpers.forked import PRELOAD
from trainmesh.cli.main import main

if __name__ == "__main__":
    multiprocessing.set_forkserver_preload([*PRELOAD, "trainmesh.cli.main"])
    raise SystemExit(main())
