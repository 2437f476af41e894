"""DataParallel's arithmetic as plain functions: split a batch along dim 0, run a step per
chunk (on replicas across GPUs, or one after another on CPU), and gather the outputs; and the
step dispatcher that lets a wrapper (DDP, FSDP's root, a replica) run a step hook.

``dp`` uses them in one process; ``ddp2`` uses them inside each node's process.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import nn

from trainmesh.strategies.step import call_hook, no_chunk_scope

ChunkScope = Callable[[Any], AbstractContextManager[Any]]


class StepCall:
    """Marks a call through a wrapper as "run this hook", not the module's forward.

    DDP (and DataParallel's replicas, and FSDP's root) only run ``forward``, and DDP prepares
    its gradient all-reduce in that call: passing a ``StepCall`` as the first argument makes
    the forward run ``training_step`` (or another hook) instead, so the wrapper does its work
    around the step. ``chunk_scope``, when given, is entered around the hook (a replica's chunk);
    ``call``, how the hook is called (``StepHooks.call``: arguments built from its signature).
    """

    __slots__ = ("hook", "chunk_scope", "lockstep", "call")

    def __init__(
        self, hook: str, chunk_scope: ChunkScope | None = None, *, lockstep: Any = None, call: Any = None
    ) -> None:
        self.hook = hook
        self.chunk_scope = chunk_scope
        self.call = call
        # A manual-optimization step whose batch is split: the chunks run in lockstep (lockstep.py).
        self.lockstep = lockstep


class StepDispatcher(nn.Module):
    """``forward(StepCall(hook), batch, ...)`` runs ``module.<hook>(batch, ...)``; any other
    call is the module's forward.

    With ``chunk_devices`` (ddp2), the batch is split across those devices as DataParallel
    does, and the outputs are gathered.
    """

    def __init__(self, module: nn.Module, chunk_devices: Sequence[torch.device] | None = None) -> None:
        super().__init__()
        self.module = module
        self.chunk_devices = list(chunk_devices) if chunk_devices else None
        # torch's way to keep parameters/buffers out of DDP's sync (a per-rank head, a local
        # count; Lightning's test_ddp_wrapper) is a name list on the module DDP wraps: DDP wraps
        # this dispatcher, so the module's names are carried over under its "module." prefix.
        ignored = getattr(module, "_ddp_params_and_buffers_to_ignore", None)
        if ignored:
            self._ddp_params_and_buffers_to_ignore = [f"module.{name}" for name in ignored]

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if args and isinstance(args[0], StepCall):
            call = args[0]
            if self.chunk_devices is not None:
                scope = call.chunk_scope or no_chunk_scope
                if call.lockstep is not None:
                    return call.lockstep.run(call.hook, args[1], args[2:], len(self.chunk_devices), scope, call.call)
                return run_chunked_step(
                    self.module, call.hook, args[1], args[2:], self.chunk_devices, scope, call=call.call
                )
            if call.chunk_scope is not None:  # dp on GPUs: this replica's thread runs one chunk
                with call.chunk_scope(args[1]):
                    return _run_hook(self.module, call, args[1:], kwargs)
            return _run_hook(self.module, call, args[1:], kwargs)
        if self.chunk_devices is not None:
            # ddp2 in a user's own loop: the node's batch is split across its devices here too.
            return split_forward(self.module, args, kwargs, self.chunk_devices)
        return self.module(*args, **kwargs)


def _run_hook(module: nn.Module, call: StepCall, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    method = getattr(module, call.hook)
    return method(*args, **kwargs) if call.call is None else call.call(method, *args, **kwargs)


def split_batch(batch: Any, chunks: int) -> list[Any]:
    """``batch`` cut along dim 0 into at most ``chunks`` pieces, as DataParallel scatters.

    Tensors anywhere in tuples, lists, dicts, namedtuples and dataclasses are split; other
    values are shared by every piece. A batch smaller than ``chunks`` gives fewer pieces.

    >>> [x.shape[0] for x, _ in split_batch((torch.zeros(5, 2), "tag"), 2)]
    [3, 2]
    """
    pieces = _split(batch, chunks)
    return pieces if isinstance(pieces, list) else [batch]


def _split(data: Any, chunks: int) -> list[Any] | None:
    if isinstance(data, torch.Tensor):
        return list(data.chunk(chunks, dim=0)) if data.dim() > 0 else None
    if isinstance(data, Mapping):
        by_key = {key: _split(value, chunks) for key, value in data.items()}
        mapping_type: Any = type(data)  # the batch's own mapping class, rebuilt from pairs
        return _combine(by_key.values(), lambda values: mapping_type(zip(by_key.keys(), values)), data.values())
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        names = [f.name for f in dataclasses.fields(data)]
        parts = [_split(getattr(data, name), chunks) for name in names]
        return _combine(
            parts,
            lambda values: dataclasses.replace(data, **dict(zip(names, values))),
            [getattr(data, name) for name in names],
        )
    if isinstance(data, (list, tuple)):
        parts = [_split(item, chunks) for item in data]
        if isinstance(data, tuple) and hasattr(data, "_fields"):
            return _combine(parts, lambda values: type(data)(*values), data)
        return _combine(parts, lambda values: type(data)(values), data)
    return None


def _combine(parts: Any, build: Any, originals: Any) -> list[Any] | None:
    parts, originals = list(parts), list(originals)
    counts = {len(p) for p in parts if p is not None}
    if not counts:
        return None
    count = min(counts)
    return [build([p[i] if p is not None else o for p, o in zip(parts, originals)]) for i in range(count)]


def gather_outputs(outputs: Sequence[Any], device: torch.device | None = None) -> Any:
    """Merge per-chunk outputs on one device: tensors concatenated along dim 0, 0-dim tensors
    (a loss) stacked into a vector with one entry per chunk, dicts merged key by key."""
    first = outputs[0]
    if isinstance(first, torch.Tensor):
        moved = [o.to(device) if device is not None else o for o in outputs]
        return torch.stack(moved) if first.dim() == 0 else torch.cat(moved, dim=0)
    if isinstance(first, Mapping):
        mapping_type: Any = type(first)  # the step's own mapping class, rebuilt from pairs
        return mapping_type((key, gather_outputs([o[key] for o in outputs], device)) for key in first)
    if isinstance(first, (list, tuple)):
        merged = [gather_outputs([o[i] for o in outputs], device) for i in range(len(first))]
        if isinstance(first, tuple) and hasattr(first, "_fields"):
            return type(first)(*merged)
        return type(first)(merged)
    if first is None:
        return None
    return list(outputs)


def run_chunked_step(
    module: nn.Module,
    hook: str,
    batch: Any,
    args: tuple[Any, ...],
    devices: Sequence[torch.device],
    chunk_scope: ChunkScope,
    *,
    call: Callable[..., Any] | None = None,
) -> Any:
    """``module.<hook>`` on each chunk of ``batch``, outputs gathered on ``devices[0]``;
    ``chunk_scope(chunk)`` is entered around each chunk's call (``call``: ``StepHooks.call``)."""
    chunks = split_batch(batch, len(devices))
    if len(chunks) == 1:
        return gather_outputs([run_on_chunk(module, hook, chunks[0], args, chunk_scope, call)])
    if devices[0].type != "cuda":
        calls = [functools.partial(run_on_chunk, module, hook, chunk, args, chunk_scope, call) for chunk in chunks]
        return gather_outputs(run_chunks_in_turn(module, calls))
    from torch.nn.parallel import parallel_apply, replicate

    from trainmesh.utilities.collections import move_to_device

    used = list(devices[: len(chunks)])
    # As DataParallel: fresh replicas every step, so state a step changes on one is lost.
    replicas = replicate(StepDispatcher(module), used)
    inputs = [
        (StepCall(hook, chunk_scope, call=call), move_to_device(chunk, device), *args)
        for chunk, device in zip(chunks, used)
    ]
    return gather_outputs(parallel_apply(replicas, inputs, devices=used), used[0])


def split_forward(
    module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], devices: Sequence[torch.device]
) -> Any:
    """DataParallel's forward: the inputs split along dim 0, a forward per device, outputs
    gathered. This is what a user's own loop gets from ``Runtime(strategy="dp")``."""
    if devices[0].type == "cuda" and len(devices) > 1:
        from torch.nn.parallel import data_parallel

        return data_parallel(module, args, device_ids=[d.index for d in devices], module_kwargs=kwargs)
    pieces = split_batch((args, kwargs), len(devices))
    if len(pieces) == 1:
        return module(*args, **kwargs)
    calls = [functools.partial(module, *piece_args, **piece_kwargs) for piece_args, piece_kwargs in pieces]
    return gather_outputs(run_chunks_in_turn(module, calls))


class SplitForward(nn.Module):
    """``strategy="dp"``'s placed model: calling it splits the batch across the devices.

    Its state dict is the wrapped module's own, so checkpoints carry the user's names.
    """

    def __init__(self, module: nn.Module, devices: Sequence[torch.device]) -> None:
        super().__init__()
        self.module = module
        self.devices = list(devices)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return split_forward(self.module, args, kwargs, self.devices)

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False) -> Any:
        return self.module.load_state_dict(state_dict, strict=strict, assign=assign)


def run_chunks_in_turn(module: nn.Module, calls: Sequence[Callable[[], Any]]) -> list[Any]:
    """CPU: the chunks' calls one after another on the module itself, each as if on its own device.

    Every device of a ddp run seeded alike starts a step with the same RNG state and the same
    buffers, and the run keeps rank 0's buffers (DDP broadcasts them; DataParallel keeps
    device 0's). So each chunk starts from the step's RNG state and forward-time state
    (buffers such as BatchNorm's running statistics, and frozen parameters such as Keras'
    moving statistics and dropout seed), and chunk 0's end state is the one kept: dropout
    masks and running statistics then match ddp's.
    """
    state = forward_time_state(module)
    start_rng, start_state = torch.get_rng_state(), [t.detach().clone() for t in state]
    outputs = [calls[0]()]
    kept_rng, kept_state = torch.get_rng_state(), [t.data for t in state]
    for call in calls[1:]:
        torch.set_rng_state(start_rng)
        for tensor, start in zip(state, start_state):
            # .data, not copy_(): an in-place write would invalidate tensors autograd saved in
            # the earlier chunks' forward, and the objects must stay (DDP and Keras hold them).
            tensor.data = start.clone()
        outputs.append(call())
    torch.set_rng_state(kept_rng)
    for tensor, kept in zip(state, kept_state):
        tensor.data = kept
    return outputs


def forward_time_state(module: nn.Module) -> list[torch.Tensor]:
    """What a forward pass may change besides the graph: buffers and non-trained parameters."""
    frozen = [p for p in module.parameters() if not p.requires_grad]
    return [*module.buffers(), *frozen]


def run_on_chunk(
    module: nn.Module,
    hook: str,
    chunk: Any,
    args: tuple[Any, ...],
    chunk_scope: ChunkScope,
    call: Callable[..., Any] | None = None,
) -> Any:
    with chunk_scope(chunk):  # so that self.log weighs values by this chunk's size
        return call_hook(module, hook, (chunk, *args), call)


def mean_loss(output: Any) -> Any:
    """Without a ``training_step_end``, the loss is the mean of the per-chunk losses; a loss summed
    over valid tokens (``"num_tokens"`` beside it) is the sum of the chunks' sums, its count
    theirs, as one device's over the whole batch."""
    if isinstance(output, torch.Tensor):
        return output.mean()
    if isinstance(output, dict) and isinstance(output.get("loss"), torch.Tensor):
        counts = output.get("num_tokens")
        if counts is not None:
            total = (
                torch.stack([torch.as_tensor(n) for n in counts]).sum() if isinstance(counts, list) else counts.sum()
            )
            return {**output, "loss": output["loss"].sum(), "num_tokens": total}
        return {**output, "loss": output["loss"].mean()}
    return output


def manual_refusal_on_replicas(devices: Sequence[torch.device], strategy: str) -> str:
    """Why manual optimization is refused where a step runs on replicas (several GPUs), or ""
    where the chunks run in turn on the module itself (lockstep.py)."""
    if len(devices) < 2 or devices[0].type != "cuda":
        return ""
    return (
        f"strategy={strategy!r} on {len(devices)} GPUs copies the module onto each GPU at the start of every step "
        "and runs the copies in parallel threads (torch's replicate and parallel_apply), so an opt.step() inside "
        "training_step would update the module while the copies go on with the old weights, and would run once "
        "per copy. Use strategy='ddp' (one process per GPU: the same numbers as dp's chunks), or return the loss "
        "from training_step (automatic optimization)"
    )
