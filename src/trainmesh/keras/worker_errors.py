"""An exception raised in a ``ddp_spawn``/``ddp_fork`` worker reaches the program as itself.

Keras' own ``fit`` raises what a callback, a step or a data adapter raises (a callback's ``StopTraining``
of the program's own, a ``ValueError``), and a program catches it by its type. Under ``ddp_spawn`` the
workers run that ``fit``; torch's process context reported a worker's exception as its own
``ProcessRaisedException`` holding the traceback as text, so ``except StopTraining:`` in the program no
longer caught it. Each worker now leaves its exception, pickled, in a folder of the launching process's
temporary directory before it raises, and the launching process raises that exception (torch's, with the
worker's traceback, as its cause). An exception that cannot travel (not picklable) stays torch's.
"""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

from trainmesh.runtime import Runtime


class ReportingErrors:
    """``run(runtime, *args)`` in a worker, leaving what it raises in ``folder`` (picklable: it travels)."""

    def __init__(self, run: Callable[..., Any], folder: str) -> None:
        self.run, self.folder = run, folder

    def __call__(self, runtime: Runtime, *args: Any) -> Any:
        try:
            return self.run(runtime, *args)
        except Exception as exc:
            if runtime.process.reports_to_parent:
                _leave(exc, os.path.join(self.folder, f"rank-{runtime.process.local_rank}.pickle"))
            raise


def _leave(exc: Exception, path: str) -> None:
    try:
        data = pickle.dumps(exc)
        pickle.loads(data)  # noqa: S301 -- our own bytes, written just now: one that cannot come back stays torch's
    except Exception:  # noqa: BLE001 -- any pickling failure: the launching process raises torch's report
        return
    with open(path, "wb") as file:
        file.write(data)


def launch_raising_as_itself(runtime: Runtime, run: Callable[..., Any], *args: Any) -> Any:
    """``runtime.launch(run, runtime, *args)``; a worker's exception raised here as itself."""
    from torch.multiprocessing import ProcessRaisedException

    if getattr(runtime.launcher, "start_method", None) is None:  # not a spawn launcher: raised here already
        return runtime.launch(run, runtime, *args)
    folder = tempfile.mkdtemp(prefix="trainmesh-keras-worker-errors-")
    try:
        return runtime.launch(ReportingErrors(run, folder), runtime, *args)
    except ProcessRaisedException as report:
        path = os.path.join(folder, f"rank-{report.error_index}.pickle")
        if not os.path.exists(path):
            raise
        with open(path, "rb") as file:
            original = pickle.loads(file.read())  # noqa: S301 -- written by this launch's own worker
        raise original from report
    finally:
        shutil.rmtree(folder, ignore_errors=True)
