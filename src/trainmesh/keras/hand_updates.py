"""A variable a training step of the program's own updates by hand from its batch: refused before training.

Under ``N`` processes trainmesh averages what reaches a Keras optimizer's ``apply`` (sync.py), keeps
BatchNormalization's moving statistics on the global batch's moments (batch_statistics.py) and sums the
metrics' states; a model variable a ``train_step`` assigns itself (``self.centre.assign(0.9 * self.centre +
0.1 * ops.mean(x, axis=0))``, an EMA of a statistic; ``self.seen.assign_add(batch_size)``, a count of the
samples) is left to each process, which updates it from its own part of the batch. The processes' copies
part (an EMA of each part's mean), or agree and differ from one process's (a count of half the samples):
the run trains and differs from Keras' own fit at the global batch, silently (measured: the EMA of the
inputs' mean 0.19 apart between the ranks, the sample count 128 where Keras counts 256).

The step probe (step_probe.py) runs the step on the first samples and on each half of them, applying
nothing. Every non-trainable variable of the model after each run is compared: a variable whose value after a half is
not its value after the whole batch follows the batch (a counter of steps, or a target network moved towards
the online one by ``assign``, is the same after each run, and the same on every process in the run). Such a
step is refused on every process, naming the variable and what to do instead. Seed generators' states are
left out: the probe replays the whole batch's draws in the halves (step_probe.py), and the run draws what one
process draws on every process (draws.py). Trainable variables no backward pass reached are compared too (a step assigning one
from its batch); those a backward pass reached are left to sync.py's check that a step applied a Keras
optimizer (a torch optimizer stepping them is stopped after the first step).

A step that updates such a variable only from a later step on (not at the step the probe runs) is caught after
the call's second training step, or at the first training epoch's end (``refuse_parted``, called by sync.py): rank
0's non-trainable variables are compared with each process's, and one held apart stops the fit on every process,
naming it.
"""

from __future__ import annotations

from typing import Any

import torch


class HandUpdated(Exception):
    """args[0]: the path of a variable the step updates by hand from its batch."""


def values(model: Any, *, unreached: bool = False) -> list[tuple[str, torch.Tensor]]:
    """Every non-trainable model variable's path and value now (a run of the probe has just ended), but seed
    generators'; with ``unreached``, the trainable ones no backward pass of the run reached too (no ``.grad``):
    keras-io's GAN with adaptive augmentation assigns its trainable ``probability`` from the batch's accuracy
    (before: stopped only at the first epoch's end, unnamed: "the trainable variables ... apart"). Those a
    backward pass reached are the optimizer's (the probe applies nothing) or a torch optimizer's (stopped
    elsewhere); an EMA copy of them assigned by hand stays where it was, as they do."""
    seeds = {
        id(generator.state) for layer in model._flatten_layers() for generator in getattr(layer, "_seed_generators", ())
    }
    chosen = list(model.non_trainable_variables)
    if unreached:
        chosen += [v for v in model.trainable_variables if v.value.grad is None]
    return [(v.path, v.value.detach().clone()) for v in chosen if id(v) not in seeds]


def refuse_batch_dependent(whole: list[tuple[str, torch.Tensor]], halves: list[list[tuple[str, torch.Tensor]]]) -> None:
    """Raise ``HandUpdated`` for the first variable whose value after a half differs from the whole's (the
    runs list the same variables in the same order: one step, the same backward passes; else not compared)."""
    for half in halves:
        if [path for path, _ in half] != [path for path, _ in whole]:
            return
    for index, (path, value) in enumerate(whole):
        for half in halves:
            other = half[index][1]
            if value.shape != other.shape or not torch.allclose(value, other, rtol=1e-6, atol=1e-7):
                raise HandUpdated(path)


def reason(path: str, world: int) -> str:
    return (
        f"the model's train_step updates the variable {path!r} by hand (assign/assign_add, not through a Keras "
        f"optimizer's apply) from its batch: run on a batch of the training data (its first samples before start; at "
        f"the first epoch's end, for a variable that moved then) and on each half of "
        f"them, the step leaves it at other values. Under {world} processes each process runs the step on its part "
        "of every global batch, and trainmesh averages only what reaches an optimizer's apply (and "
        "BatchNormalization's statistics, and metrics' states): each process would update its own copy from its own "
        "part (an EMA of a batch statistic parts between the processes; a count of samples counts one part), and the "
        "run would differ from one process's, silently. Keep such a statistic in a Keras metric (its state is summed "
        "over the processes; keras.metrics.Mean for a mean), compute it after training from the whole data, "
        "or run on one process"
    )


def moved_by_hand(model: Any, begun: list[tuple[str, torch.Tensor]]) -> bool:
    """Whether a non-trainable variable of the model (but BatchNormalization's statistics) is not at its value of
    ``begun`` (:func:`values` when training began): a step updated it from a later step on than the one the step
    probe runs (a count of samples from the second step: the processes' copies agree, each counting its part,
    80 where Keras counts 160 at 2 processes, /work/progs/k-left), so the probe runs the step once more (step_probe.py)."""
    keras = _keras()
    statistics = {
        v.path
        for layer in model._flatten_layers()
        if isinstance(layer, keras.layers.BatchNormalization) and layer.built
        for v in (layer.moving_mean, layer.moving_variance)
    }
    now = dict(values(model))
    return any(path not in statistics and path in now and not torch.equal(now[path], value) for path, value in begun)


def _keras() -> Any:
    from trainmesh.keras.backend import require_keras

    return require_keras()


# The first training steps of a call after which the processes' copies are compared too (sync.py), not only at
# each epoch's end: a step (or a callback at a batch's end) moving a variable apart at every step, or at every
# other one, is stopped after its first or second step instead of after a whole epoch trained apart.
STEPS_CHECKED = 2


def refuse_parted(runtime: Any, model: Any, skip: list[Any], step: int | None = None) -> None:
    """At a training epoch's end (``step`` None), or after the call's training step ``step`` (one of its first
    :data:`STEPS_CHECKED`), under several processes (every process calls it): a non-trainable variable of
    the model (but ``skip``, BatchNormalization's statistics, and seed generators) whose copies the processes
    hold apart was updated by hand from each process's part of the batch at a step the probe does not see (from
    the second step on, say): stopped on every process, naming it, rather than train on apart, silently. Every
    variable is compared by two sums (:func:`_summary`); the trainable ones, which the averaged gradients keep
    bit-identical, too: a step
    assigning one by hand from its batch beside apply (a rescaling of its own: the ranks 1.9e-3 apart after 2
    epochs, silently, /work/progs/k-left count_later.py) is stopped so too."""
    from trainmesh.keras.collectives import all_reduce_sum, broadcast_from_zero

    left_out = {id(v) for v in skip} | {id(g.state) for layer in model._flatten_layers() for g in _seeds(layer)}
    variables = [v for v in model.non_trainable_variables if id(v) not in left_out]
    trainable = list(model.trainable_variables)
    if runtime.world_size == 1 or not variables + trainable:
        return
    # Two numbers a variable, not the values: the check runs after the first steps of every fit call, and a
    # frozen backbone's non-trainable kernels sent whole cost 42% of a short fit (review-s56a, 10M parameters).
    mine = _summary(variables + trainable)
    gaps = (broadcast_from_zero(runtime, [mine])[0] - mine).abs().amax(dim=1).float()
    apart = all_reduce_sum(runtime, [gaps])[0]
    parted = [(v.path, float(a)) for v, a in zip(variables, apart[: len(variables)], strict=True) if float(a) > 0]
    when = "at the end of a training epoch" if step is None else f"after training step {step}"
    if trainable and float(apart[len(variables) :].max()) > 0:  # which the averaged gradients keep bit-identical
        most, row = apart[len(variables) :].max(dim=0)
        raise ValueError(_trainable_apart(float(most), trainable[int(row)].path, when))
    if parted:
        path, gap = parted[0]
        raise ValueError(
            f"the variable {path!r} of the model is apart between the processes {when} (its sums {gap:.2e} "
            f"apart): a step of yours updates it by hand (assign/assign_add, not through a Keras optimizer's apply) "
            "from each process's part of the batch, at a step the check before training does not run (not the "
            "first), so each process holds its own copy and the run differs from one process's. "
            + reason(path, runtime.world_size).split(". ", 1)[1]
        )


def _summary(variables: list[Any]) -> torch.Tensor:
    """Each variable in two numbers: its sum (accumulated in float64, so that one element's rounding-sized change
    shows) and its sum weighted by position (a swap of values shows): equal on every process where the copies
    are bit-identical, without sending the values and without a float64 copy of the weights. One position
    vector serves every variable."""
    wide = (torch.float32, torch.float64)
    flats = [variable.value.detach().flatten() for variable in variables]
    # half precision widened to float32; counts and flags to float64, exact to 2**53
    flats = [
        flat if flat.dtype in wide else flat.float() if flat.is_floating_point() else flat.double() for flat in flats
    ]
    longest = max(flat.numel() for flat in flats)
    positions = {dtype: torch.arange(1, longest + 1, dtype=dtype, device=flats[0].device) for dtype in wide}
    return torch.stack(
        [
            torch.stack(
                [flat.sum(dtype=torch.float64), torch.dot(flat, positions[flat.dtype][: flat.numel()]).double()]
            )
            for flat in flats
        ]
    )


def _trainable_apart(gap: float, path: str, when: str) -> str:
    return (
        f"the trainable variables of the model are apart between the processes {when} "
        f"({path!r} the most, its sums {gap:.2e} apart): trainmesh averages the gradients an optimizer's apply is given, so the "
        f"copies stay bit-identical unless a step of yours assigns a trainable variable by hand (assign, "
        "assign_sub: a constraint or a rescaling of its own from its batch) beside the optimizer's apply; each "
        "process then changes its copy from its own part of the batch, and the run differs from one process's. "
        "Use a Keras constraint (kernel_constraint=, applied after each update alike on every process), compute "
        "the change from the averaged gradients (v.value.grad after backward), or run on one process"
    )


def _seeds(layer: Any) -> Any:
    return getattr(layer, "_seed_generators", ())
