"""A training step of the program's own whose loss is not a mean over the batch's samples: refused before training.

Under ``N`` processes each one runs the step on its part of every global batch and the gradients are averaged,
weighted by the parts' sizes (sync.py). That is one process's gradient at the global batch when the step's loss is a
mean over the samples (Keras' compiled losses at their default reduction), and only then: a loss reduced by a sum
gives each process its part's sum (averaged: ``1/N`` of one process's), a term on a batch statistic
(``keras.ops.std(y_pred)``) or a loss over pairs of the batch's samples (contrastive) gives other numbers. The run
would train, and differ from one process's, silently.

So where the model's class overrides ``train_step`` or ``compute_loss``, or a compiled loss is the program's own, the
step is probed under several processes when training begins (a callback put first: Keras' ``fit`` has built the model,
its compiled loss and metrics and the optimizer, and no training step has run). Each process runs the model class's
``train_step`` on the first samples of the training data (the batch Keras' own data adapter makes of them) and on each
of its two halves, applying nothing (every Keras optimizer's ``apply`` records what it is given), and compares the
gradients each backward pass leaves in the model's variables (what keras/backward.py averages in the run: a step may
clip them by hand after) or, in a step running no backward pass, those ``apply`` is given. A mean loss gives
``grad(whole) == (grad(first half) + grad(second half)) / 2`` to float rounding (measured: 4e-8 to 1e-7 of the norm);
a step that does not is refused on every process (rank 0's reason, broadcast) with the relative difference. A step
whose gradients pass has each metric it updates by hand compared too, its halves' states summed against the whole
batch's (probe_trackers.py: a tracker fed a ratio of the batch's sums). What the step does outside Keras' variables
and generators (a Python counter of its own, a print, a torch optimizer's state) it does those three (or four) times
more, on every process alike.

The runs draw alike: each of Keras' random functions (``keras.src.backend.random``) is recorded in the run on the
whole batch and replayed in the halves, each taking its rows of a batch-shaped draw (as draws.py gives each process
its rows of one process's draw); each BatchNormalization's moments are the whole batch's, as constants
(batch_statistics.py makes them the global batch's, gradients included, in the run itself); a loss Keras reduces over a
mask divides by the whole batch's unmasked count in the halves (masked_counts.py: the run divides by the global
batch's). torch's own random
functions called in the step (``torch.randn_like``, ``torch.randn``, ``torch.nn.functional.dropout``:
probe_torch_draws.py) and a tensor's draw methods (``x.normal_()``: tensor_draws.py) are taped and replayed alike. A
step whose halves still move a global generator (a draw no tape sees: ``from torch import randn``, ``numpy.random``)
is run on the whole batch once more, its draws replayed: where it leaves that generator elsewhere than a half, the
draw follows the batch and the step is refused (unmapped_draws.py); else (torch's generator moved) it is run once more
with torch's generator elsewhere, and refused only where its halves differ ``NOISE_FACTOR`` times more than that moves
them. Every variable of the model (metrics', seed generators' and the optimizer's included), the gradients left in its
variables, Keras' global seed generator and torch's, numpy's and Python's generators are restored after each run: the
fit goes on as Keras' own would. Costs three calls of the step on ``PROBED_SAMPLES`` samples (four where the halves
differ), once per ``fit``.

Not probed (said in docs/how-to/keras.md): data the probe cannot index (probe_data.probe_batch) or of fewer than 4
samples, a model Keras' build leaves layers of unbuilt, a step whose halves apply other optimizers than the whole
batch (a step failing on the probe's samples or a half of them: probe_sizes.py), a batch-shaped ``shuffle`` draw. A step whose halves draw
on other rows than the whole batch (one cutting its batch itself) is compared again with Keras' draws at their
expected values (probe_expected_draws.py); torch's own draws and BatchNormalization's moments are still taped then.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch

from trainmesh.keras import (
    hand_updates,
    masked_counts,
    probe_accumulation,
    probe_expected_draws,
    probe_facts,
    probe_sizes,
    probe_torch_draws,
    probe_trackers,
    tensor_draws,
    unmapped_draws,
)
from trainmesh.keras.backend import require_keras
from trainmesh.keras.backward import BackwardAverage
from trainmesh.keras.batch_metrics import by_hand
from trainmesh.keras.batches import is_batches
from trainmesh.keras.optimizers import keras_classes_with_apply
from trainmesh.keras.own_forward import forward_of_its_own, own
from trainmesh.keras.own_forward import own_override as _own_override
from trainmesh.keras.probe_data import batch_rows
from trainmesh.keras.probe_data import first_batch as _first_batch
from trainmesh.keras.probe_reasons import relation, step_reason
from trainmesh.keras.probe_restorer import Restorer
from trainmesh.keras.probe_trackers import States

# Float rounding of 16 samples' sums moves a float32 gradient by ~1e-7 of its norm (measured: 4e-8 to 9e-8
# with Dense, Dropout, BatchNormalization); a step computing in float16/bfloat16 by ~1e-3.
TOLERANCE = 1e-4
LOW_PRECISION_TOLERANCE = 3e-2
NOISE_FACTOR = 10  # torch's own draws in the step: refused only this far above what they alone move
DRAWS: tuple[str, ...] = ("normal", "uniform", "randint", "truncated_normal", "dropout", "categorical")
DRAWS += ("shuffle", "gamma", "binomial", "beta")
REPLAYED_BY_ROWS: tuple[str, ...] = ("normal", "uniform", "randint", "truncated_normal", "dropout", "categorical")
REPLAYED_BY_ROWS += ("gamma", "binomial", "beta")
REPLAYED_BY_ROWS += probe_torch_draws.replayed_names() + tensor_draws.replayed_names()


class NotProbed(Exception):
    """A step the probe cannot compare (its runs differ in structure): left to the run itself."""


class DrawsDiffer(NotProbed):
    """The halves draw on other rows than the whole batch's: compared again with Keras' draws drawing nothing."""


def needs_probe(model: Any) -> bool:
    """Whether the model's step is the program's own: ``train_step`` or ``compute_loss`` overridden, or a
    compiled loss (a function, a ``Loss`` class) of the program's own, or a forward pass of its own
    (own_forward.py). Keras' own losses at the default reduction are means (others are refused:
    arguments.check_loss_reduction)."""
    if _own_override(model, "train_step") or _own_override(model, "compute_loss") or forward_of_its_own(model):
        return True
    return _own_losses(model)


def _own_losses(model: Any) -> bool:
    losses = require_keras().tree.flatten(getattr(model, "loss", None))
    return any(callable(loss) and (own(loss) or own(type(loss))) for loss in losses)


class _Tape:
    """Keras' random draws and BatchNormalization's moments of the run on the whole batch, replayed in the
    other runs (a replaying run reads them in the order the whole batch's run made them)."""

    def __init__(self) -> None:
        self.draws: list[tuple[str, Any]] = []
        self.moments: list[tuple[Any, Any]] = []
        self.replaying: tuple[int, int, int] | None = None  # (first row, rows, whole batch) of a replaying run
        self.position = [0, 0]  # the next draw, the next moments
        self.inside = False  # within a Keras draw: the torch functions it calls are part of it
        self.generators: dict[int, tuple[torch.Generator, torch.Tensor]] = {}  # the program's own, as found
        self.counts = masked_counts.CountTape()  # a loss over a mask: the whole batch's unmasked counts
        self.expected = False  # Keras' draws at their expected values (probe_expected_draws.py), not taped

    def saw_generator(self, generator: torch.Generator | None) -> None:
        if generator is not None and id(generator) not in self.generators:
            self.generators[id(generator)] = (generator, generator.get_state())

    def replay(self, start: int, rows: int, whole: int) -> None:
        self.replaying, self.position = (start, rows, whole), [0, 0]
        self.counts.replay(rows, whole)
        for generator, state in self.generators.values():  # the run on the whole batch moved them: put back
            generator.set_state(state)

    def next(self, which: int, name: str) -> Any:
        recorded = (self.draws, self.moments)[which]
        index = self.position[which]
        if index >= len(recorded) or (which == 0 and recorded[index][0] != name):
            raise DrawsDiffer(f"the runs differ at {name}")
        self.position[which] += 1
        return recorded[index][1] if which == 0 else recorded[index]

    def rows_of(self, name: str, recorded: Any, leading: int | None) -> Any:
        """This run's rows of a draw of the whole batch's run (all of one not batch-shaped)."""
        assert self.replaying is not None
        start, rows, whole = self.replaying
        if leading is None or (leading == recorded.shape[0] and rows == whole):
            return recorded
        if name not in REPLAYED_BY_ROWS or leading % rows or recorded.shape[0] != leading // rows * whole:
            raise DrawsDiffer(f"{name} drew {leading} rows of a batch of {rows}")
        index = torch.cat([part * whole + torch.arange(start, start + rows) for part in range(leading // rows)])
        return recorded[index.to(recorded.device)]


_FIRST_ARGUMENT = {"dropout": "inputs", "categorical": "logits", "shuffle": "x"}  # the others': shape


def _leading(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    first = args[0] if args else kwargs.get(_FIRST_ARGUMENT.get(name, "shape"))
    shape = tuple(getattr(first, "shape", first) or ())
    return int(shape[0]) if shape else None


def _taped(keras_draw: Callable[..., Any], tape: _Tape, name: str) -> Callable[..., Any]:
    @functools.wraps(keras_draw)
    def draw(*args: Any, **kwargs: Any) -> Any:
        from keras.src.backend.torch.core import get_device

        if get_device() == "meta":  # Keras building symbolically: nothing drawn
            return keras_draw(*args, **kwargs)
        if tape.expected:
            return probe_expected_draws.expected_draw(keras_draw, name, args, kwargs)
        inputs = (args[0] if args else kwargs.get("inputs")) if name == "dropout" else None
        if tape.replaying is not None:
            out = tape.rows_of(name, tape.next(0, name), _leading(name, args, kwargs))
        else:
            tape.inside = True
            try:
                if inputs is not None:  # Dropout: its mask (0 or 1 / keep) recorded, the halves' inputs their own
                    rest = {k: v for k, v in kwargs.items() if k != "inputs"}
                    out = keras_draw(torch.ones_like(inputs), *args[1:], **rest)
                else:
                    out = keras_draw(*args, **kwargs)
            finally:
                tape.inside = False
            tape.draws.append((name, out))
        return inputs * out if inputs is not None else out

    return draw


@contextlib.contextmanager
def _drawing_alike(tape: _Tape) -> Iterator[None]:
    """Keras' random functions taped, and BatchNormalization's moments the whole batch's, as constants."""
    from keras.src import backend as keras_backend
    from keras.src.layers.normalization.batch_normalization import BatchNormalization

    module = keras_backend.random
    keras_functions = {name: getattr(module, name) for name in DRAWS if hasattr(module, name)}
    keras_moments = vars(BatchNormalization)["_moments"]

    def _moments(self: Any, inputs: Any, mask: Any) -> Any:
        if tape.replaying is not None:
            return tape.next(1, "BatchNormalization")
        mean, variance = keras_moments(self, inputs, mask)
        tape.moments.append((mean.detach(), variance.detach()))
        return tape.moments[-1]

    for name, function in keras_functions.items():
        setattr(module, name, _taped(function, tape, name))
    type.__setattr__(BatchNormalization, "_moments", _moments)
    try:
        with probe_torch_draws.taped(tape), tensor_draws.taped(tape), masked_counts.counted_alike(tape.counts):
            yield  # torch's own draws, drawn directly in the step, taped too; a masked loss the whole batch's count
    finally:
        for name, function in keras_functions.items():
            setattr(module, name, function)
        type.__setattr__(BatchNormalization, "_moments", keras_moments)


def _gradients(
    model: Any,
    data: Any,
    facts: probe_facts.StepFacts | None = None,
    given: list[tuple[Any, list[Any]]] | None = None,
    averaged: list[list[Any]] | None = None,
) -> list[tuple[Any, list[Any]]]:
    """The gradients of one call of the step on ``data``, applying nothing: those each backward pass left in
    the model's variables (what backward.py averages in the run: a step may clip them by hand after), or,
    in a step running no backward pass (``torch.autograd.grad``), those each Keras optimizer's ``apply`` is
    given (what sync.averaged_apply averages; recorded in ``given`` too). With ``averaged`` (the whole batch's
    passes), each pass leaves the whole batch's gradients in the variables, as the run's average does."""
    passes: list[tuple[Any, list[Any]]] = []
    given = [] if given is None else given

    def at_pass_end(gradients: list[Any], _batch: int) -> list[Any]:
        passes.append(("backward", [None if g is None else g.detach().clone() for g in gradients]))
        if averaged is not None and len(passes) <= len(averaged) and len(averaged[len(passes) - 1]) == len(gradients):
            return [g if a is None else a.clone() for g, a in zip(gradients, averaged[len(passes) - 1], strict=True)]
        return gradients

    def record(optimizer: Any, _keras_apply: Any, gradients: Any, _variables: Any) -> None:
        given.append((id(optimizer), [None if g is None else g.detach().clone() for g in gradients]))
        if facts is not None:  # the whole batch's run: what the step did, for a refusal's words (probe_facts.py)
            facts.applied(optimizer)

    backward = BackwardAverage(at_pass_end, lambda: 1)
    backward.step_begins(model)
    try:
        with _applying_nothing(record), probe_facts.watching(model, facts):
            try:
                type(model).train_step(model, data)  # the class's: not what fit's wrappers put on the model
            except NotProbed:
                raise
            except Exception as error:  # noqa: BLE001 -- the model cannot take these rows (or a probe's bug): said
                raise probe_sizes.StepFailed(probe_sizes.rows_of(data), error) from error
    finally:
        backward.remove()
    return passes or given


@contextlib.contextmanager
def _applying_nothing(record: Callable[..., None]) -> Iterator[None]:
    """Each Keras optimizer class's ``apply`` records what it is given and applies nothing, within the block
    (over whatever the run put there: optimizers.every_apply_through's, restored after)."""
    found = {cls: vars(cls)["apply"] for cls in keras_classes_with_apply()}

    def apply(self: Any, grads: Any, trainable_variables: Any = None) -> None:
        record(self, None, list(grads), trainable_variables)

    for cls in found:
        type.__setattr__(cls, "apply", apply)
    try:
        yield
    finally:
        for cls, method in found.items():
            type.__setattr__(cls, "apply", method)


def _relative(a: list[tuple[Any, list[Any]]], b: list[tuple[Any, list[Any]]]) -> tuple[float, int]:
    """The largest relative difference ``|a - b| / |a|`` over the applies (global norms), and at which apply."""
    if [o for o, _ in a] != [o for o, _ in b] or any(len(x) != len(y) for (_, x), (_, y) in zip(a, b, strict=True)):
        raise NotProbed("the runs apply different optimizers or variables")
    worst, where = 0.0, 0
    for index, ((_, x), (_, y)) in enumerate(zip(a, b, strict=True)):
        pairs = [(g, h) for g, h in zip(x, y, strict=True) if g is not None and h is not None]
        if not pairs:
            continue
        scale = max(float(torch.stack([torch.sum(g.double() ** 2) for g, _ in pairs]).sum().sqrt()), 1e-12)
        diff = float(torch.stack([torch.sum((g.double() - h.double()) ** 2) for g, h in pairs]).sum().sqrt())
        if diff / scale > worst:
            worst, where = diff / scale, index
    return worst, where


def _mean_of(first: list[tuple[Any, list[Any]]], second: list[tuple[Any, list[Any]]]) -> list[tuple[Any, list[Any]]]:
    if [o for o, _ in first] != [o for o, _ in second]:
        raise NotProbed("the halves apply different optimizers")
    return [
        (o, [None if g is None or h is None else (g + h) / 2 for g, h in zip(x, y, strict=True)])
        for (o, x), (_, y) in zip(first, second, strict=True)
    ]


def _refuse_differing_trackers(  # noqa: PLR0913 -- the probe's runs
    model: Any, halves: list[Any], restorer: Restorer, tape: _Tape, runs: tuple[Any, list[States]], limit: float
) -> None:
    """A metric the step updates by hand whose halves' merged state reads otherwise than the whole batch's
    (probe_trackers.py) is refused, once compared again with the whole batch's gradients left in the halves'
    backward passes, as the run's average leaves them in each process's (a tracker of the gradients' norm)."""
    whole, tracked = runs
    metrics = by_hand(model)
    try:
        probe_trackers.refuse_differing(metrics, tracked[0], tracked[1], tracked[2:], limit)
    except probe_trackers.TrackerDiffers:
        if not whole or any(kind != "backward" for kind, _ in whole):
            raise
        again, half = [], len(require_keras().tree.flatten(halves[0])[0])
        count = half + len(require_keras().tree.flatten(halves[1])[0])
        for start, part in zip((0, half), halves, strict=True):
            restorer.restore()
            tape.replay(start, half, count)
            _gradients(model, part, averaged=[gradients for _, gradients in whole])
            again.append(probe_trackers.states(metrics))
        probe_trackers.refuse_differing(metrics, tracked[0], tracked[1], again, limit)


def step_difference(model: Any, data: Any, limit: float = TOLERANCE) -> tuple[float, float, str]:
    """(the largest relative difference between the step's gradients on ``data`` and the mean of its
    halves', what torch's own draws alone move them: 0 when the step draws none, what the gradients are of
    the halves': probe_reasons.relation). Where the halves draw on other rows than the whole batch's (a step
    cutting its batch itself), compared again with Keras' draws at their expected values, drawing nothing."""
    try:
        return _compared(model, data, limit, expected=False)
    except DrawsDiffer:
        return _compared(model, data, limit, expected=True)


def _compared(model: Any, data: Any, limit: float, *, expected: bool) -> tuple[float, float, str]:
    keras = require_keras()
    count = len(keras.tree.flatten(data)[0])
    half = count // 2
    halves = [keras.tree.map_structure(lambda leaf, s=s: leaf[s], data) for s in (slice(0, half), slice(half, None))]
    restorer, tape, facts = Restorer(model), _Tape(), probe_facts.StepFacts()
    tape.expected = expected
    metrics = by_hand(model)  # updated by the step itself: their states after each run
    tracked: list[States] = [probe_trackers.states(metrics)]
    try:
        with _drawing_alike(tape):
            applied: list[list[tuple[Any, list[Any]]]] = [[], [], []]  # what each run's applies are given
            whole = _gradients(model, data, facts, applied[0])
            parts, untaped, after = [], False, [hand_updates.values(model, unreached=True)]
            tracked.append(probe_trackers.states(metrics))
            for start, part, given in zip((0, half), halves, applied[1:], strict=True):
                restorer.restore()
                tape.replay(start, half, count)
                parts.append(_gradients(model, part, given=given))
                after.append(hand_updates.values(model, unreached=True))
                tracked.append(probe_trackers.states(metrics))
                untaped = untaped or not torch.equal(torch.get_rng_state(), restorer.generators[0])
                after_half = unmapped_draws.generator_states()
            if unmapped_draws.moved(restorer.generators, after_half):  # draws no mapping saw: do they follow the batch?
                restorer.restore()
                tape.replay(0, count, count)
                _gradients(model, data)
                if which := unmapped_draws.moved(after_half, unmapped_draws.generator_states()):
                    raise unmapped_draws.UnmappedDraws(which)
            hand_updates.refuse_batch_dependent(after[0], after[1:])
            difference, _ = _relative(whole, _mean_of(*parts))
            if difference > limit and probe_accumulation.applies_accumulated(whole, applied[0]):
                difference, _ = _relative(applied[0], _mean_of(*applied[1:]))  # gradients accumulated: what it applies
                if expected and difference <= limit:  # a mean, but drawing on parts of its batch it cuts itself
                    raise probe_accumulation.AccumulatedDraws(len(whole))
            noise = 0.0
            if difference > limit and untaped:  # torch's draws the tape did not see: the whole batch again, elsewhere
                restorer.restore()
                tape.replay(0, count, count)
                torch.manual_seed(int(torch.get_rng_state().sum().item()) ^ 0x5EED)  # elsewhere, drawing nothing
                noise, _ = _relative(whole, _gradients(model, data))
            if difference <= limit and not untaped:  # the gradients a mean: is each value the step tracks one?
                _refuse_differing_trackers(model, halves, restorer, tape, (whole, tracked), limit)
            found = (relation(whole, parts, limit) or probe_facts.sentence(facts)) if difference > limit else ""
            return difference, noise, found
    finally:
        restorer.restore()
        tape.replay(0, count, count)  # the program's own torch.Generators as they were


def tolerance(model: Any) -> float:
    policy = getattr(model, "dtype_policy", None)
    low = getattr(policy, "compute_dtype", "float32") in ("float16", "bfloat16")
    return LOW_PRECISION_TOLERANCE if low else TOLERANCE


def refusal(  # noqa: PLR0913 -- the data as fit takes it, the run's size
    model: Any,
    x: Any,
    y: Any,
    sample_weight: Any,
    class_weight: Any,
    world: int,
    batch_size: int | None = None,
    *,
    train: bool = True,
) -> str | None:
    """Why the model's step cannot run under ``world`` processes (its reason), or None: a mean loss, or
    not probed (see the module's doc). A step failing on the probe's samples or their halves is probed
    again at twice ``batch_size`` (each process's), and refused where it fails at another size than that
    (probe_sizes.py). ``train=False`` (``evaluate``): a ``test_step`` of the program's own only."""
    own_test = _own_override(model, "test_step")  # its trackers compared too (probe_trackers.refuse_test_step)
    if world == 1 or not ((needs_probe(model) and train) or own_test):
        return None
    if not all(layer.built for layer in model._flatten_layers()):
        return None
    fit_data = (x, y, sample_weight, class_weight)
    each = batch_size if batch_size is not None or not is_batches(x) else functools.partial(batch_rows, x)
    return probe_sizes.at_run_sizes(lambda n: _probed(model, fit_data, world, n, train), model, world, each)


def _probed(model: Any, fit_data: tuple[Any, Any, Any, Any], world: int, samples: int, fit: bool) -> str | None:
    own_test = _own_override(model, "test_step")
    try:
        data = _first_batch(*fit_data, samples=samples)
        if data is None:
            return None
        samples = probe_sizes.rows_of(data)
        train = needs_probe(model) and fit
        difference, noise, found = step_difference(model, data, tolerance(model)) if train else (0, 0, "")
        if own_test and difference <= tolerance(model):
            probe_trackers.refuse_test_step(model, data, tolerance(model))
    except NotProbed:
        return None
    except unmapped_draws.UnmappedDraws as unmapped:
        return unmapped_draws.reason(unmapped.args[0], world)
    except hand_updates.HandUpdated as updated:
        return hand_updates.reason(updated.args[0], world)
    except probe_accumulation.AccumulatedDraws as drawn:
        return probe_accumulation.reason(drawn.args[0], world)
    except probe_trackers.TrackerDiffers as differs:
        return probe_trackers.reason(differs, world, samples, fit)
    limit = tolerance(model)
    if difference <= limit or (noise > limit / NOISE_FACTOR and difference <= NOISE_FACTOR * noise):
        return None
    return step_reason(model, difference, noise, world, samples=samples, found=found, own_losses=_own_losses(model))
