"""Pipeline parallelism on ``torch.distributed.pipelining``: the model cut into stages, each rank
holding its stages' layers, batches run through a schedule in micro-batches.

How a model is cut: ``pipeline_cut``. The first step checks that each stage ran exactly its parts, in
their order, so a forward that runs parts in another order than they were registered is an error,
not a wrong model; and that a forward reaching for a part another stage holds says so
(``stage_checks``).

How the loss is computed. Only the last stage has the model's output. There, for each
micro-batch, the module's own ``training_step`` runs with ``self(x)`` answered by the pipeline's
output for that micro-batch (``stage_calls.replaying``); validation, test and predict steps run the same way
on the whole batch's output of a forward-only pass (a schedule built without a loss). The input fed to the
first stage is ``module.pipeline_input(batch)`` (the first element of a tuple batch by default);
``module.pipeline_kwargs(batch)`` (none by default) are keyword inputs every stage's forward
receives, cut into micro-batches as the input is (torch's own ``schedule.step(x, **kwargs)``).

A stage fixes its activation shapes at its first step, so each distinct input shape gets its own
stages and schedule (an evaluation batch size). Evaluation batches of any size run: padded with
copies of their last row to a multiple of the micro-batch count, the padding's outputs dropped.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:
    from torch.distributed.pipelining.schedules import _PipelineSchedule

from trainmesh.strategies import collectives
from trainmesh.strategies.mesh import ParallelMesh
from trainmesh.strategies.stage_calls import inside_schedule
from trainmesh.strategies.stage_checks import PartOrderCheck, explaining_dropped_parts
from trainmesh.utilities.collections import apply_to_tensors

# Schedule names (case and "_" ignored) -> torch's class name. Multi-stage schedules hold
# several stages per rank; the V-shaped ones place them r and 2*pp-1-r.
SCHEDULES = {
    "gpipe": "ScheduleGPipe",
    "1f1b": "Schedule1F1B",
    "interleaved1f1b": "ScheduleInterleaved1F1B",
    "loopedbfs": "ScheduleLoopedBFS",
    "interleavedzerobubble": "ScheduleInterleavedZeroBubble",
    "zbvzerobubble": "ScheduleZBVZeroBubble",
    "dualpipev": "ScheduleDualPipeV",
}
_SINGLE_STAGE = {"gpipe", "1f1b"}
_V_SHAPED = {"zbvzerobubble", "dualpipev"}


@dataclasses.dataclass(frozen=True)
class ScheduleChoice:
    key: str
    class_name: str
    stages_per_rank: int

    @property
    def v_shaped(self) -> bool:
        return self.key in _V_SHAPED


def choose_schedule(name: str, stages_per_rank: int | None) -> ScheduleChoice:
    if stages_per_rank is not None and (not isinstance(stages_per_rank, int) or isinstance(stages_per_rank, bool)):
        raise TypeError(
            f"stages_per_rank={stages_per_rank!r}; give a whole number of stages per rank (or leave it unset)"
        )
    key = name.lower().replace("_", "").replace("-", "")
    if key not in SCHEDULES:
        known = ", ".join(cls.removeprefix("Schedule") for cls in SCHEDULES.values())
        raise ValueError(f"pipeline schedule {name!r} is not known; choose one of: {known}")
    if key in _SINGLE_STAGE:
        if stages_per_rank not in (None, 1):
            raise ValueError(
                f"schedule {name!r} runs one stage per rank; stages_per_rank={stages_per_rank} needs an "
                "interleaved schedule (Interleaved1F1B, LoopedBFS, InterleavedZeroBubble, ZBVZeroBubble)"
            )
        return ScheduleChoice(key, SCHEDULES[key], 1)
    per_rank = 2 if stages_per_rank is None else stages_per_rank
    if key in _V_SHAPED and per_rank != 2:
        raise ValueError(
            f"schedule {name!r} places exactly 2 stages on each rank (a V); stages_per_rank={per_rank}: "
            "leave stages_per_rank unset, or give 2"
        )
    if per_rank < 2:
        raise ValueError(f"schedule {name!r} interleaves several stages per rank; give stages_per_rank of 2 or more")
    return ScheduleChoice(key, SCHEDULES[key], per_rank)


def stage_indices(pp_rank: int, pp_size: int, choice: ScheduleChoice) -> list[int]:
    """The stages rank ``pp_rank`` holds: ``r, r+pp, ...`` (looped) or ``r, 2*pp-1-r`` (V)."""
    if choice.v_shaped:
        return [pp_rank, 2 * pp_size - 1 - pp_rank]
    return [pp_rank + round_ * pp_size for round_ in range(choice.stages_per_rank)]


# The keyword arguments of torch's ``schedule.step`` itself: a model input of these names would
# never reach the stages.
_SCHEDULE_STEP_NAMES = {"target", "losses", "return_outputs", "loss_kwargs"}


def check_stage_kwargs(kwargs: Any, size: int) -> dict[str, Any]:
    """``pipeline_kwargs(batch)``: a dict of per-sample tensors (``size`` rows each), which torch
    can cut into micro-batches the way it cuts the input."""
    if not isinstance(kwargs, dict):
        raise TypeError(
            f"pipeline_kwargs(batch) returned {type(kwargs).__name__}; return a dict of the forward's "
            "keyword inputs, e.g. {'positions': positions}"
        )
    for name, value in kwargs.items():
        if name in _SCHEDULE_STEP_NAMES:
            raise ValueError(
                f"pipeline_kwargs(batch) names {name!r}, which torch's schedule.step takes for itself "
                "and would not pass to the stages; rename that forward argument"
            )
        if not isinstance(value, torch.Tensor) or value.dim() == 0 or value.shape[0] != size:
            shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise ValueError(
                f"pipeline_kwargs(batch)[{name!r}] is {shape}, not a tensor with one row per sample ({size}): the "
                "pipeline cuts every keyword input into micro-batches along its first dimension, as it cuts the "
                "input. Give it a leading batch dimension (expand a mask shared by all samples), or build a value "
                "that does not depend on the batch inside forward (or as a buffer)"
            )
    return kwargs


def rows(batch: Any, index: torch.Tensor) -> Any:
    """The micro-batch of ``batch`` at ``index`` (every tensor's leading rows)."""
    return apply_to_tensors(batch, lambda t: t[index] if t.dim() > 0 else t)


def refuse_evaluation_under_v(schedule: ScheduleChoice) -> None:
    if schedule.v_shaped:
        raise ValueError(
            f"the {schedule.class_name} schedule cannot run forward only in this torch (its V-shaped action list "
            "runs backward steps even in eval() and fails), so validation, test and predict cannot run under it. "
            "Use Interleaved1F1B or InterleavedZeroBubble, which evaluate, or train without evaluation"
        )


def check_pipeline_loader(loader: Any, *, train: bool, microbatches: int, schedule: ScheduleChoice) -> None:
    """Refuse, before any step, the loaders a pipeline cannot run: training batches that do not
    cut into ``microbatches`` equal micro-batches (the last, partial one included), and any
    evaluation under a schedule that cannot run forward only."""
    if not train:
        refuse_evaluation_under_v(schedule)
        return  # evaluation batches of any size run (padded to equal micro-batches)
    batch_size = getattr(loader, "batch_size", None)
    if batch_size is None:
        return  # a batch sampler of the user's: checked at each step
    if batch_size % microbatches:
        raise ValueError(
            f"the training batch size {batch_size} cannot be cut into {microbatches} equal pipeline micro-batches; "
            f"use a batch size divisible by {microbatches}, or microbatches= that divides {batch_size}"
        )
    try:
        samples = len(loader.sampler)
    except TypeError:
        return
    last = samples % batch_size
    if last and not getattr(loader, "drop_last", False) and last % microbatches:
        raise ValueError(
            f"each epoch ends with a partial batch of {last} samples ({samples} samples per data-parallel rank, "
            f"batches of {batch_size}), which {microbatches} pipeline micro-batches cannot cut evenly; pass "
            f"drop_last=True to the DataLoader, or use a dataset size that leaves no partial batch"
        )


# ---- stages and schedules ------------------------------------------------------------------
class Pipeline:
    """This rank's stages, and one schedule per input shape (a stage fixes its shapes at its
    first step). ``step`` runs a batch through the whole pipeline."""

    def __init__(
        self,
        stages: dict[int, nn.Module],
        cut: list[list[str]],
        num_stages: int,
        choice: ScheduleChoice,
        microbatches: int,
        group: Any,
        device: torch.device,
    ) -> None:
        # cut: every stage's parts (this rank's stages hold cut[i] for i in stages).
        self.stages, self.cut, self.num_stages = stages, cut, num_stages
        self.choice, self.microbatches, self.group, self.device = choice, microbatches, group, device
        self.holds_first, self.holds_last = 0 in stages, num_stages - 1 in stages
        pp_size = num_stages // choice.stages_per_rank
        self.last_stage_rank = next(r for r in range(pp_size) if num_stages - 1 in stage_indices(r, pp_size, choice))
        self._schedules: dict[Any, _Scheduled] = {}
        self._checked = False

    def check_training_batch(self, size: int) -> None:
        if size % self.microbatches:
            raise ValueError(
                f"a training batch of {size} samples cannot be cut into {self.microbatches} equal micro-batches; "
                f"use a batch size divisible by {self.microbatches} (and drop_last=True for a partial last batch)"
            )

    def _schedule(self, example: Any, count: int, training: bool) -> _Scheduled:
        # Training and evaluation keep separate schedules: torch re-infers a schedule's shapes
        # (with a round of messages) whenever it switches between the two.
        shapes = tuple((tuple(t.shape), t.dtype) for t in _tensors(example))
        key = (shapes, count, training)
        if key not in self._schedules:
            self._schedules[key] = self._build(count, training)
        return self._schedules[key]

    def _build(self, count: int, training: bool) -> _Scheduled:
        from torch.distributed import pipelining
        from torch.distributed.pipelining import schedules

        built = [
            pipelining.PipelineStage(module, index, self.num_stages, self.device, group=self.group)
            for index, module in sorted(self.stages.items())
        ]
        cls = getattr(schedules, self.choice.class_name)
        scheduled = _Scheduled()
        try:
            # Without a loss a schedule runs forward only: evaluation's.
            # scale_grads=False: torch would divide every gradient by the micro-batch count after
            # each step, a gradient accumulated over earlier batches too; the strategy's loss
            # divides each micro-batch's mean loss instead, which touches this step's share only
            # (and leaves a loss summed over tokens whole: its gradients are divided by the count).
            scheduled.schedule = cls(
                built[0] if len(built) == 1 else built,
                n_microbatches=count,
                loss_fn=scheduled.loss if training else None,
                scale_grads=False,
            )
        except (ValueError, AssertionError) as err:
            raise ValueError(
                f"torch's {self.choice.class_name} refuses this layout ({len(built)} stage(s) per rank, "
                f"{self.num_stages} stages, {count} micro-batches): {err}"
            ) from err
        return scheduled

    def step(
        self,
        inputs: Any,
        size: int,
        *,
        training: bool,
        loss: Callable[[Any, torch.Tensor], torch.Tensor] | None = None,
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        """Run one batch (``inputs`` for the first stage, ``kwargs`` for every stage's forward;
        ``size`` rows). Training calls ``loss(output, rows)`` on the last stage per micro-batch and
        backpropagates it; returns the last stage's merged output when evaluating (None elsewhere)."""
        if not training:
            refuse_evaluation_under_v(self.choice)  # a user's loop reaches here without a loader check
        kwargs = check_stage_kwargs(kwargs or {}, size)
        count = self.microbatches
        if training:
            self.check_training_batch(size)
        else:
            # Forward only, any size: padded (with copies of its last row) to equal micro-batches
            # the schedule accepts; the padding's outputs are cut off again below.
            inputs, kwargs = _padded(inputs, -size % count), _padded(kwargs, -size % count)
        scheduled = self._schedule((inputs, kwargs), count, training)
        args = tuple(inputs) if isinstance(inputs, tuple) else (inputs,)
        args = args if self.holds_first else ()
        check = None if self._checked else [PartOrderCheck(self.stages[i], self.cut[i], i) for i in sorted(self.stages)]
        # The first step says which part a forward reached for that another stage holds.
        first = explaining_dropped_parts(self.stages, self.cut) if check is not None else contextlib.nullcontext()
        with inside_schedule(self.stages.values()), first:
            output = self._run(scheduled, args, kwargs, size, count, training, loss)
        if check is not None:
            self._checked = True
            for stage_check in check:
                stage_check.verify()
        return output

    def _run(
        self,
        scheduled: _Scheduled,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        size: int,
        count: int,
        training: bool,
        loss: Callable[[Any, torch.Tensor], torch.Tensor] | None,
    ) -> Any:
        # torch cuts ``kwargs`` into micro-batches as it cuts the input (and the target: the row
        # indices the loss reads its micro-batch by) and gives each stage's forward its chunk.
        assert scheduled.schedule is not None
        if not training:
            output = scheduled.schedule.step(*args, **kwargs)
            output = apply_to_tensors(output, lambda t: t[:size]) if output is not None else None
        else:
            targets: dict[str, Any] = (
                {"target": torch.arange(size, device=self.device), "losses": []} if self.holds_last else {}
            )
            with scheduled.computing(loss, expected_calls=count if self.holds_last else 0):
                output = scheduled.schedule.step(*args, return_outputs=False, **targets, **kwargs)
        return output


class _Scheduled:
    """One torch schedule, and the loss its last stage calls during a training step.

    A new schedule first infers its stages' shapes: on the last stage that calls the loss once
    on placeholder tensors (uninitialised memory). That call must not reach the module's
    ``training_step`` (it would log garbage): it gets a stand-in of the right shape, and the
    calls that follow are counted, so that a torch that skipped the inference would be caught
    rather than lose a micro-batch.
    """

    def __init__(self) -> None:
        self.schedule: _PipelineSchedule | None = None  # set by the builder, right after
        self.inferred = False
        self._loss: Callable[[Any, torch.Tensor], torch.Tensor] | None = None
        self._calls = 0

    @contextlib.contextmanager
    def computing(
        self, loss: Callable[[Any, torch.Tensor], torch.Tensor] | None, *, expected_calls: int
    ) -> Iterator[None]:
        self._loss, self._calls = loss, 0
        try:
            yield
        finally:
            self._loss = None
        self.inferred = True
        if self._calls != expected_calls:
            raise RuntimeError(
                f"the pipeline's last stage computed {self._calls} micro-batch losses in a step of {expected_calls} "
                "micro-batches: this torch version's schedule calls the loss differently than trainmesh expects, "
                "and the step's gradient would be wrong. Please report it with the torch version"
            )

    def loss(self, output: Any, index: torch.Tensor) -> torch.Tensor:
        if not self.inferred:  # the very first call of a new schedule: shape inference
            self.inferred = True
            return _placeholder_loss(output)
        self._calls += 1
        assert self._loss is not None, "the loss is set for the duration of a training step"
        return self._loss(output, index)


def _placeholder_loss(output: Any) -> torch.Tensor:
    """A loss with the output's gradient shapes and no value that matters (shape inference)."""
    parts = [(t.float() * 0).sum() for t in _tensors(output) if t.is_floating_point()]
    return torch.stack(parts).sum() if len(parts) > 1 else parts[0]


def _padded(inputs: Any, rows: int) -> Any:
    """``inputs`` with ``rows`` copies of their last row added (every tensor along dim 0)."""
    if rows == 0:
        return inputs
    return apply_to_tensors(inputs, lambda t: torch.cat([t, t[-1:].expand(rows, *t.shape[1:])]))


def _tensors(value: Any) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []

    def keep(tensor: torch.Tensor) -> torch.Tensor:
        found.append(tensor)
        return tensor

    apply_to_tensors(value, keep)
    return found


def step_loss(
    losses: list[torch.Tensor], counts: list[torch.Tensor | None], *, owner: str, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The step's loss on the last stage (mean of the micro-batches' means, or sum of their sums)
    and its token count (None for a mean loss); zeros on the other stages, which receive them."""
    if not losses:
        return torch.zeros((), device=device), torch.zeros((), device=device, dtype=torch.float64)
    given = [c for c in counts if c is not None]
    if not given:
        return torch.stack(losses).mean().float(), None
    if len(given) != len(counts):
        raise ValueError(
            f"{owner}.training_step returned num_tokens for some pipeline micro-batches and not for "
            "others; return {'loss': summed_loss, 'num_tokens': n} from every one, or a mean loss"
        )
    return torch.stack(losses).float().sum(), torch.stack(given).sum()


_STEP_KEYS = ("loss", "num_tokens")


def shared_step_result(
    losses: list[torch.Tensor],
    counts: list[torch.Tensor | None],
    outputs: list[Any],
    *,
    rows: int,
    owner: str,
    mesh: ParallelMesh,
    stage_rank: int,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor | None, Any]:
    """The step's loss, token count and output on every stage (the last stage's micro-batches gave
    ``outputs``, ``rows`` samples each), the output as one process's training_step gives it for the
    whole batch: the loss tensor, or a dict of the loss, ``num_tokens`` summed and the other keys:
    tensors with a row per sample concatenated (the batch's rows, in order), else a list with one
    value per micro-batch. The progress bar, the finiteness check, the gradients' division by the
    count and the batch-end hooks then run alike on every rank."""
    loss, count = step_loss(losses, counts, owner=owner, device=device)
    dicts = [output for output in outputs if isinstance(output, dict)]
    # The form, for the other stages: -1 the loss alone, 0 a dict of loss (and count), 1 with more keys.
    form = -1.0 if len(dicts) < len(outputs) else float(any(set(d) - set(_STEP_KEYS) for d in dicts))
    no_count = torch.full((), -1.0, dtype=torch.float64, device=device)
    totals = torch.stack([loss.to(no_count), no_count if count is None else count.to(no_count), no_count * 0 + form])
    collectives.broadcast_tensors(mesh, [totals], src=stage_rank, over="pp")
    _, counted, form = totals.tolist()  # read once
    loss, count = totals[0].float(), (totals[1] if counted >= 0 else None)
    if form < 0:
        return loss, count, loss
    output = {"loss": loss, **({} if count is None else {"num_tokens": count})}
    if form > 0:
        output.update(collectives.from_last_stage(mesh, _other_keys(dicts, rows), stage_rank=stage_rank))
    return loss, count, output


def _other_keys(outputs: list[dict[str, Any]], rows: int) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for key in dict.fromkeys(key for output in outputs for key in output if key not in _STEP_KEYS):
        values = [apply_to_tensors(output.get(key), lambda t: t.detach().cpu()) for output in outputs]
        per_sample = all(isinstance(v, torch.Tensor) and v.dim() > 0 and v.shape[0] == rows for v in values)
        merged[key] = torch.cat(values) if per_sample and len({v.shape[1:] for v in values}) == 1 else values
    return merged


def rows_in(inputs: Any) -> int:
    first = inputs[0] if isinstance(inputs, (tuple, list)) else inputs
    return int(first.shape[0])
