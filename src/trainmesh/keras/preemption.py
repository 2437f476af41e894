"""SIGTERM/SIGUSR1 during ``trainmesh.keras.fit``: every process stops after the same batch, rank 0
saves the run's state, the run exits 75, and the same ``fit`` run again continues exactly.

The run's supervision (``supervision/``, as under the Trainer) catches the signals while Keras'
``model.fit`` runs; SyncCallback asks it after every batch whether every process stops now. The
state is saved by rank 0 alone, to ``trainmesh_keras/fit-<hash>/last-preempted-<program>.ckpt`` under
the working directory (``FOLDER``; the folder's hash is of what makes the fit the same one: the how-manieth
``fit`` of the script it is, the model's variables, the number of processes and samples, ``epochs``,
``batch_size``, ``shuffle``; the file's, ``run_identity.preemption_name``, of the program: its command
line, model class and fit number, so that two scripts whose fits name one folder keep a state each;
``last-preempted.ckpt``, the previous release's name, is still read): the model's and the optimizer's variables, the epoch and the batches of it
already trained, the epoch logs so far (History), and each process's metric totals of the epoch
and random generator states, as they were when the epoch began and as they are (gathered to rank 0).

Keras' ``fit`` starts at an epoch's beginning (``initial_epoch``), and a preemption's grace period
(SLURM, Kubernetes: some seconds) need not last to an epoch's end, so the stop is not deferred.
Instead the resumed ``fit`` starts at the saved epoch with the random generators as they were when
that epoch began, so that its data come in the same order (``shuffle=True`` included: Keras draws
the permutation from torch's generator), then as they were at the stop (a Dropout without a seed
draws from torch's generator too); its first batches, those already trained, are read and passed
over without training (their batch callbacks run, with the saved metrics). The result is
the uninterrupted run's weights and History, bit for bit on CPU. Callbacks' own state (an
EarlyStopping's patience count) starts afresh, as with Keras' BackupAndRestore. A ``fit`` that
ends normally removes the saved state, so that the next run of the script starts afresh. The state
records its run (``trainer/run_identity.py``): scripts sharing a working directory can name the same
folder, and only the program that saved it resumes it or removes it; another's is left, said in one line.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
from typing import Any

import numpy as np

from trainmesh.keras.arguments import assign_values, random_states, set_random_states, variable_values
from trainmesh.keras.data import num_samples
from trainmesh.keras.optimizers import applied_optimizers, before_first_apply, own_overrides
from trainmesh.runtime import Runtime
from trainmesh.trainer import run_identity
from trainmesh.utilities.lightning_loggers import lightning_named_logger

# trainmesh's notices go to stderr, through the logging module, as the Trainer's do
log = lightning_named_logger(__name__)

FOLDER = "trainmesh_keras"  # under the working directory: where the script is run again


def _samples(x: Any) -> int | None:
    try:
        return num_samples(x)
    except (AttributeError, TypeError, ValueError):  # a dataset or generator: its length is not known here
        return None


def metric_variables(model: Any) -> list[Any]:
    return [v for metric in model.metrics for v in metric.variables]


class KerasPreemption:
    """One ``fit`` call's preemption: where it is, what to save, what it resumed from."""

    def __init__(self, runtime: Runtime, model: Any, x: Any, kwargs: dict[str, Any], call: int) -> None:
        self.runtime, self.model = runtime, model
        # What must match for a resume to continue the same run: each fit of a script has its own
        # folder, so that a script's first fit, run again, never takes its second fit's state.
        self.fingerprint = {
            "call": call,  # the how-manieth fit of the script (training.py)
            "world": runtime.world_size,
            "samples": _samples(x),
            "variables": [(v.path, tuple(v.shape)) for v in model.variables],
            **{k: repr(kwargs.get(k)) for k in ("epochs", "batch_size", "shuffle", "steps_per_epoch")},
        }
        digest = hashlib.sha256(repr(self.fingerprint).encode()).hexdigest()[:12]
        self.folder = os.path.join(os.path.abspath(FOLDER), f"fit-{digest}")
        # Which program saves here (run_identity, as the Trainer's checkpoints): scripts sharing a working
        # directory can name the same folder (a sweep's differing in an argument), and each resumes its own.
        self.run = run_identity.this_run(model, fit=call)
        self.name = run_identity.preemption_name(self.run)  # the state's file in the folder: this program's
        self.epoch, self.batches = 0, 0  # the epoch running and its batches done
        self.epoch_random: dict[str, Any] | None = None  # this process's generators when the epoch began
        self.logs: list[dict[str, Any]] = []  # epoch logs, from the first epoch of the run on
        self.resumed: dict[str, Any] | None = None  # the saved state's small part, on every rank
        self.skip = 0  # batches of the resumed epoch to pass over
        self.pending_random: dict[str, Any] | None = None  # to set when the resumed epoch's first batch begins
        self._variables: dict[str, Any] | None = None  # rank 0: the saved variables, until restored

    # ---- resuming -------------------------------------------------------------------------------
    def find(self) -> None:
        """Before ``model.fit``: rank 0's saved state, if the previous run was preempted (every rank)."""
        supervision = self.runtime.supervision
        reason = supervision.restart_reason(self.folder, self.name)
        reason = next((r for r in self.runtime.all_gather_object(reason) if r), None)
        path, found = os.path.join(self.folder, self.name), None
        # Its own file, else one the previous release wrote (``last-preempted.ckpt``, perhaps another program's).
        for candidate in supervision.preemption_checkpoints(self.folder, self.name) if reason is not None else []:
            if self.runtime.global_rank != 0 or not os.path.exists(candidate):
                continue
            saved = _load(candidate)
            # The state is the preemption marker itself: the Trainer's rule (a marker another program
            # left is no reason to resume, launcher restart or not) comes down to the program's match.
            why = run_identity.other_program(saved, self.run)
            if why is None:
                path, found = candidate, saved
                break
            log.info(f"trainmesh: {candidate} is not this program's preemption state ({why}): left for its own program")
        if self.runtime.global_rank == 0 and reason is not None:
            said = f"resuming from {path}" if found else "but there is no saved state: training starts afresh"
            log.info(f"trainmesh: {reason}: {said}")  # on stderr, as the Trainer's notices
        big = ("variables", "optimizer", "other_optimizers")
        small = None if found is None else {k: v for k, v in found.items() if k not in big}
        small = self.runtime.broadcast(small, 0)
        self.resumed, self._variables = small, found
        if small is not None:
            self.logs = list(small["logs"])

    def refuse_a_step_around_the_skip(self, ours: bool) -> None:
        """When training begins: a resume that passes over batches trained before the stop does it in
        trainmesh's step function (sync.installed); ``ours``: whether that is the one Keras' fit will call.
        A model class overriding ``make_train_function`` may leave another (Keras' fit calls whatever its
        maker left in ``train_function``), which would train those batches again: refused, every rank alike."""
        if self.resumed is None or not self.resumed["batches"] or ours:
            return
        overrides = own_overrides(self.model, ("make_train_function",))
        raise ValueError(
            f"this fit resumes a preempted run after {self.resumed['batches']} batches of epoch "
            f"{self.resumed['epoch'] + 1}, which trainmesh passes over in the step function it makes, but the model "
            f"{type(self.model).__name__}{' (' + ', '.join(overrides) + ')' if overrides else ''} leaves another in "
            "train_function, which Keras' fit calls: the resumed fit would train those batches again and end apart "
            "from the fit never stopped. Let make_train_function return Keras' own (super().make_train_function(force), "
            f"unchanged) and put the change in train_step, or delete {self.folder} to start this fit afresh"
        )

    def restore_variables(self) -> None:
        """When training begins, before rank 0's variables are broadcast: the saved ones on rank 0."""
        if self.resumed is None:
            return
        optimizer = self.model.optimizer
        if not optimizer.built:  # every rank: the broadcast covers the optimizer's variables too
            optimizer.build(self.model.trainable_variables)
        others = self._variables.get("other_optimizers", {}) if self._variables is not None else None
        if self._variables is not None:
            assign_values(self.model.variables, self._variables["variables"])
            assign_values(optimizer.variables, self._variables["optimizer"])
            self._variables = None
        self._restore_other_optimizers(self.runtime.broadcast(others, 0))
        self.model._initial_epoch = self.resumed["epoch"]  # where Keras' fit loop starts

    def _restore_other_optimizers(self, saved: dict[str, list[Any]]) -> None:
        """The optimizers a custom ``train_step`` applied besides ``model.optimizer`` (a GAN's
        ``d_optimizer``, ``g_optimizer``) take their saved state before their first apply (every rank:
        the values were broadcast, and these optimizers are not among the variables broadcast later)."""
        unnamed = self.resumed.get("unnamed_optimizers", []) if self.resumed else []
        missing = [name for name in saved if not _is_keras_optimizer(getattr(self.model, name, None))]
        if unnamed or missing:
            raise ValueError(
                f"the preempted fit applied optimizers whose state this run cannot give back "
                f"({unnamed or missing}): {'made inside train_step, not held by the model' if unnamed else 'no longer attributes of the model'}, "
                "so they would restart from scratch and the resumed fit would differ from the one never stopped; "
                "keep each optimizer a train_step applies as an attribute of the model (as compile(d_optimizer=...) "
                f"does in keras-io's GAN guide), or delete {self.folder} to start afresh"
            )
        for name, values in saved.items():
            before_first_apply(getattr(self.model, name), functools.partial(_built_with, values=values))

    def epoch_begins(self, epoch: int) -> None:
        """After Keras reset the metrics, before it draws the epoch's data order."""
        self.epoch, self.batches = epoch, 0
        if self.resumed is not None and epoch == self.resumed["epoch"]:
            mine = self.resumed["ranks"][self.runtime.global_rank]
            # The epoch's data order is drawn from the generators as they were when it began; its
            # training steps drew on from there (Dropout without a seed uses torch's generator), so
            # the generators as they were at the stop follow once the order is drawn.
            set_random_states(mine["epoch_random"] or mine["random"])
            self.pending_random = mine["random"] if mine["epoch_random"] else None
            assign_values(metric_variables(self.model), mine["metrics"])
            self.skip = self.resumed["batches"]
            self.resumed = None
        self.epoch_random = random_states()

    def batch_begins(self) -> None:
        """The resumed epoch's first batch is drawn: the generators as they were at the stop."""
        if self.pending_random is not None:
            set_random_states(self.pending_random)
            self.pending_random = None

    def epoch_ends(self, epoch: int, logs: Any) -> None:
        self.logs.append({"epoch": epoch, **dict(logs or {})})
        self.epoch, self.batches, self.epoch_random = epoch + 1, 0, None

    # ---- stopping -------------------------------------------------------------------------------
    def save(self, path: str) -> None:
        """The supervision's save (every rank, a collective): rank 0 writes the state to ``path``."""
        mine = {
            "metrics": [np.array(v.numpy()) for v in metric_variables(self.model)],
            "epoch_random": self.epoch_random,  # None between two epochs
            "random": random_states(),
        }
        ranks = self.runtime.all_gather_object(mine)
        if self.runtime.global_rank == 0:
            optimizer = self.model.optimizer
            others = [o for o in applied_optimizers() if o is not optimizer]
            named = {name: o for name, o in vars(self.model).items() if any(o is other for other in others)}
            state = {
                run_identity.RUN_KEY: self.run,
                "fingerprint": self.fingerprint,
                "epoch": self.epoch,
                "batches": self.batches,
                "logs": self.logs,
                "ranks": ranks,
                "variables": variable_values(self.model),
                "optimizer": [np.array(v.numpy()) for v in optimizer.variables] if optimizer.built else [],
                # Every rank's copy is the same (their gradients were averaged): rank 0's stands for all.
                "other_optimizers": {name: [np.array(v.numpy()) for v in o.variables] for name, o in named.items()},
                "unnamed_optimizers": [type(o).__name__ for o in others if not any(o is n for n in named.values())],
            }
            os.makedirs(os.path.dirname(path), exist_ok=True)
            partial = path + ".partial"
            with open(partial, "wb") as file:
                pickle.dump(state, file)
            os.replace(partial, path)  # whole or not at all
        self.runtime.barrier()

    def owned(self, path: str) -> bool:
        """Whether the state at ``path`` is this program's, to remove when its fit ends (another
        program's stays: its next run resumes from it)."""
        return run_identity.other_program(_load(path), self.run) is None

    def finished(self) -> None:
        """After a fit that ended (the supervision removed the state file): the empty folders go too."""
        if self.runtime.global_rank == 0:
            for folder in (self.folder, os.path.dirname(self.folder)):
                if os.path.isdir(folder) and not os.listdir(folder):
                    os.rmdir(folder)

    def complete_history(self, history: Any) -> None:
        """A resumed fit's History: the epochs before the stop first, as one fit never stopped."""
        earlier = [logs for logs in self.logs if logs["epoch"] not in history.epoch]
        if not earlier:
            return
        history.epoch = [logs["epoch"] for logs in earlier] + list(history.epoch)
        # Keys from the saved epochs too: a fit stopped after its last epoch resumes with none left to run.
        names = dict.fromkeys([name for logs in earlier for name in logs if name != "epoch"] + list(history.history))
        for name in names:
            before = [logs[name] for logs in earlier if name in logs]
            history.history[name] = before + list(history.history.get(name, []))


def _load(path: str) -> Any:
    with open(path, "rb") as file:
        return pickle.load(file)


def _is_keras_optimizer(obj: Any) -> bool:
    return obj is not None and callable(getattr(obj, "apply", None)) and hasattr(obj, "variables")


def _built_with(optimizer: Any, variables: Any, *, values: list[Any]) -> None:
    if not optimizer.built:
        optimizer.build(variables)
    assign_values(optimizer.variables, values)
