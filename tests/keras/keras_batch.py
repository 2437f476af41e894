"""The Keras ddp programs as legs of one launch of 2 processes (helpers/batches.py).

python keras_batch.py --batch SPEC.json -> the legs one after another in the same 2 workers and process
                                           group; a leg is NAME OUT, NAME a key of PROGRAMS: that
                                           program's ``ddp`` run, writing OUT as it does when run alone

Each program started on its own costs an agent and 2 workers that import torch and Keras (about 4 CPU-s
each) for a few seconds of training; in one launch the workers import them once. The first process
(the agent) is a fork of the test process's fork server (torch and trainmesh imported); under
``Batches(fork_workers=True)`` it imports Keras (1.6 CPU-s, no thread started) and its workers are
forks of it, which import nothing again (as new interpreters each would: about 4 CPU-s). A program's
first ``tk.fit`` then finds the processes started, as every later call of its own already did.
"""

import os
import sys

os.environ["KERAS_BACKEND"] = "torch"  # before keras is imported, here and in the workers

from lean_keras import leave_out_unused_packages  # noqa: E402

leave_out_unused_packages(__name__)  # before keras: see lean_keras.py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def run_keras_run(out: str) -> None:
    import keras_run

    keras_run.run_ddp(out)


def run_keras_callbacks_run(out: str) -> None:
    import keras_callbacks_run

    keras_callbacks_run.run_ddp(out)


def run_keras_zero1_run(out: str) -> None:
    import keras_zero1_run

    keras_zero1_run.run(out)


def run_keras_unseen_programs(out: str) -> None:
    import keras_unseen_programs

    keras_unseen_programs.run_ddp(out)


def run_keras_random_programs(out: str) -> None:
    import keras_random_programs

    keras_random_programs.run_ddp(out)


def run_keras_batch_metric_programs(out: str) -> None:
    import keras_batch_metric_programs

    keras_batch_metric_programs.run_ddp(out)


def run_keras_masked_programs(out: str) -> None:
    import keras_masked_programs

    keras_masked_programs.run_ddp(out)


# name: the program's ddp run (its module imported in the workers only)
PROGRAMS = {
    "keras_run": run_keras_run,
    "keras_callbacks_run": run_keras_callbacks_run,
    "keras_zero1_run": run_keras_zero1_run,
    "keras_unseen_programs": run_keras_unseen_programs,
    "keras_random_programs": run_keras_random_programs,
    "keras_batch_metric_programs": run_keras_batch_metric_programs,
    "keras_masked_programs": run_keras_masked_programs,
}


def run_leg(argv: list[str]) -> None:
    name, out = argv
    PROGRAMS[name](out)


if __name__ == "__main__":
    from helpers.batches import WORKERS, run_batch

    if os.environ.get(WORKERS) == "fork":  # the workers are forks of this process: they inherit Keras
        import keras  # noqa: F401
        import trainmesh.keras  # noqa: F401

    run_batch(sys.argv[2], run_leg, limit=400)
