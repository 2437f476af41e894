"""Per-rank memory of a training run, estimated before running it, beside ZeRO's formulas.

For Ψ parameters on N data-parallel ranks the ZeRO paper gives the training state each rank
holds (parameters + gradients + optimizer state): 2Ψ + 2Ψ + 12Ψ in mixed precision (fp16
weights and gradients, fp32 master weights and Adam's two moments), 4Ψ + 4Ψ + 8Ψ for fp32
Adam; zero1 divides the optimizer state by N, sharded the gradients too, fsdp everything.
The estimate here counts what trainmesh itself keeps (autocast keeps fp32 weights, so
"16-mixed" and "bf16-mixed" hold 4 + 4 + 8 bytes per parameter with Adam) and adds the
activations, measured with one forward pass on a slice of a sample batch and scaled.

>>> import torch
>>> estimate = estimate_memory(torch.nn.Linear(100, 10), strategy="ddp", world_size=2, optimizer="adam")
>>> estimate.parameters, estimate.gradients, estimate.optimizer_state
(4040, 4040, 8080)
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from trainmesh.strategies.capabilities import REPLICATED, SHARD_GROUP, WHOLE, WORLD, MemoryModel

# Adam's two moments, SGD's momentum buffer: tensors of a parameter's size, per parameter.
_KNOWN_STATES = {"adam": 2, "adamw": 2, "sgd": 0, "sgd_momentum": 1}
MIXED = ("16-mixed", "bf16-mixed")


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one rank holds, by part; ``transient`` is held only around forward and backward
    (sharded: the whole parameters, gathered), ``activations`` those saved for backward."""

    strategy: str
    world_size: int
    num_parameters: int
    parameters: int
    gradients: int
    optimizer_state: int
    activations: int
    transient: int
    formula: str
    formula_bytes: int

    @property
    def state(self) -> int:
        """Parameters + gradients + optimizer state: what ZeRO's formulas count."""
        return self.parameters + self.gradients + self.optimizer_state

    @property
    def peak(self) -> int:
        """The most a rank holds at once, by this estimate."""
        return self.state + self.activations + self.transient

    def describe(self) -> str:
        """One line: the estimate's parts in MiB and ZeRO's formula beside it."""
        mib = 2**20
        return (
            f"{self.strategy:8s} N={self.world_size}: params {self.parameters / mib:.2f} + grads "
            f"{self.gradients / mib:.2f} + optimizer {self.optimizer_state / mib:.2f} + activations "
            f"{self.activations / mib:.2f} + transient {self.transient / mib:.2f} = {self.peak / mib:.2f} MiB "
            f"per rank | ZeRO {self.formula} = {self.formula_bytes / mib:.2f} MiB"
        )


def estimate_memory(
    model: nn.Module,
    *,
    strategy: str = "ddp",
    world_size: int = 1,
    precision: str = "32-true",
    optimizer: Any = "adam",
    batch: Any = None,
    shard_size: int | None = None,
    probe_rows: int = 2,
) -> MemoryEstimate:
    """Per-rank bytes of ``model`` trained with ``optimizer`` under ``strategy`` on ``world_size`` ranks.

    Args:
        model: the module (a model that builds its layers in ``configure_model`` is estimated by
            running that on a copy on the meta device).
        strategy: ``"single"``, ``"ddp"``, ``"zero1"``, ``"sharded"``, ``"fsdp"``, ``"hsdp"`` (tp and
            pp roughly, as a division; default ``"ddp"``).
        world_size: number of ranks (default 1).
        precision: the training precision (default ``"32-true"``; under 16-mixed/bf16-mixed the
            activations are measured under autocast).
        optimizer: a name (``"adam"``, the default, ``"adamw"``, ``"sgd"``, ``"sgd_momentum"``), an
            optimizer class or instance (others are probed by one step on a tiny parameter).
        batch: one rank's input batch (a tensor, or a tuple/list whose first item is the model's
            input); the activations are measured on its first ``probe_rows`` rows and scaled to its
            size (0 without a batch; default None).
        shard_size: hsdp's shard group (default: all ranks, i.e. one node).
        probe_rows: how many rows of ``batch`` are run to measure the activations (default 2).

    Examples:
        >>> estimate_memory(torch.nn.Linear(10, 10), strategy="fsdp", world_size=2, optimizer="sgd").state
        440
    """
    name = strategy.lower()
    models = memory_models()
    if name not in models:
        raise ValueError(f"strategy={strategy!r} has no memory model; choose one of: {', '.join(sorted(models))}")
    model_of = models[name]
    if world_size < 1:
        raise ValueError(f"world_size={world_size} must be at least 1")
    psi, param_bytes = trained_parameter_bytes(model, precision)
    states = optimizer_states_per_parameter(optimizer)
    divisors = {"1": 1, "n": world_size, "s": shard_size or world_size}
    split_p, split_g, split_o = (divisors[key] for key in _parts(model_of))
    # Whole parameters gathered from forward to backward where they are sharded at the step.
    transient = param_bytes - param_bytes // split_p if model_of.gathered_for_backward else 0
    activations = (
        measure_activation_bytes(model, batch, probe_rows=probe_rows, precision=precision) if batch is not None else 0
    )
    if model_of.splits_activations:
        activations //= world_size  # roughly: each rank runs 1/tp of each layer or 1/pp of the layers
    formula, formula_bytes = zero_formula(
        name, psi, world_size, precision=precision, states=states, shard_size=shard_size or world_size
    )
    return MemoryEstimate(
        strategy=name,
        world_size=world_size,
        num_parameters=psi,
        parameters=math.ceil(param_bytes / split_p),
        gradients=math.ceil(param_bytes / split_g),
        optimizer_state=math.ceil(states * param_bytes / split_o),
        activations=activations,
        transient=transient,
        formula=formula,
        formula_bytes=formula_bytes,
    )


def trained_parameter_bytes(model: nn.Module, precision: str = "32-true") -> tuple[int, int]:
    """(Ψ, bytes) of the trainable parameters as training holds them: a "-true" precision converts
    them, a mixed one keeps them fp32 (the projection of ``trainmesh scale`` counts the same way).

    >>> trained_parameter_bytes(torch.nn.Linear(10, 10), "bf16-true")
    (110, 220)
    """
    params = [p for p in model.parameters() if p.requires_grad]
    return sum(p.numel() for p in params), sum(p.numel() * _element_size(p, precision) for p in params)


def _element_size(param: torch.Tensor, precision: str) -> int:
    true_dtypes = {"bf16-true": torch.bfloat16, "16-true": torch.float16, "64-true": torch.float64}
    dtype = true_dtypes.get(precision, param.dtype)  # "-true" converts the module; mixed keeps fp32
    return torch.empty((), dtype=dtype).element_size()


def zero_formula(
    strategy: str, psi: int, n: int, *, precision: str = "32-true", states: int = 2, shard_size: int | None = None
) -> tuple[str, int]:
    """ZeRO's per-rank bytes for ``psi`` parameters: ("2Ψ+2Ψ+12Ψ/N", bytes) and the like.

    Mixed precision is the paper's 2 + 2 + K with K = 4 (fp32 master) + 4 x states; otherwise
    p + p + p x states with p the parameter's bytes (4 for fp32).

    >>> zero_formula("zero1", 1000, 4, precision="16-mixed")
    ('2Ψ+2Ψ+12Ψ/N', 7000)
    """
    width = _bytes_of(precision)
    p, g, k = (2, 2, 4 + 4 * states) if precision in MIXED else (width, width, width * states)
    shard = shard_size or n
    split = {key: {WHOLE: 1, WORLD: n, SHARD_GROUP: shard}[key] for key in (WHOLE, WORLD, SHARD_GROUP)}
    model_of = memory_models().get(strategy.lower(), REPLICATED)
    parts = _parts(model_of)
    if model_of.gathered_for_backward:
        # The paper's P_os+g: parameters whole, gradients and optimizer state sharded.
        text, parts = f"{p}Ψ+({g}Ψ+{k}Ψ)/N", (WHOLE, WORLD, WORLD)
    elif parts[0] == WHOLE:
        # Whole parameters and gradients (ZeRO-2 keeps whole parameters too).
        text = f"{p}Ψ+{g}Ψ+{k}Ψ" + ("/N" if parts[2] == WORLD else "")
    else:
        text = f"{p + g + k}Ψ/" + ("S" if parts[0] == SHARD_GROUP else "N")
    total = sum(bytes_ * psi / split[key] for bytes_, key in zip((p, g, k), parts))
    return text, round(total)


def memory_models() -> dict[str, MemoryModel]:
    """The named strategies that state a memory model (``capabilities.memory_model``), by name."""
    from trainmesh.strategies.registry import memory_models as stated

    return stated()


def _parts(model: MemoryModel) -> tuple[str, str, str]:
    return model.parameters, model.gradients, model.optimizer_state


def _bytes_of(precision: str) -> int:
    return {"bf16-true": 2, "16-true": 2, "64-true": 8}.get(precision, 4)


def optimizer_states_per_parameter(optimizer: Any) -> int:
    """How many parameter-sized tensors the optimizer keeps per parameter (Adam: 2).

    >>> optimizer_states_per_parameter(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1, momentum=0.9))
    1
    """
    if isinstance(optimizer, str):
        key = optimizer.lower()
        if key not in _KNOWN_STATES:
            raise ValueError(
                f"optimizer={optimizer!r} is not known by name; choose one of {sorted(_KNOWN_STATES)} "
                "or pass the optimizer class or instance"
            )
        return _KNOWN_STATES[key]
    if isinstance(optimizer, torch.optim.Optimizer):
        defaults, cls = dict(optimizer.defaults), type(optimizer)
    elif isinstance(optimizer, type) and issubclass(optimizer, torch.optim.Optimizer):
        defaults, cls = {}, optimizer
    else:
        raise TypeError(f"optimizer={optimizer!r}: pass a name, an optimizer class or an optimizer instance")
    if cls in (torch.optim.Adam, torch.optim.AdamW) and not defaults.get("amsgrad", False):
        return 2
    if cls is torch.optim.SGD:
        return 1 if defaults.get("momentum", 0) else 0
    return _probe_states(cls, defaults)


def _probe_states(cls: type[torch.optim.Optimizer], defaults: dict[str, Any]) -> int:
    """One step of the optimizer on a 4-element parameter: its state tensors of that size."""
    probe = nn.Parameter(torch.zeros(4))
    defaults.setdefault("lr", 1e-3)
    optimizer = cls([probe], **defaults)
    probe.grad = torch.ones(4)
    optimizer.step()
    state = optimizer.state[probe].values()
    return sum(v.numel() // probe.numel() for v in state if isinstance(v, torch.Tensor) and v.dim() > 0)


def measure_activation_bytes(model: nn.Module, batch: Any, *, probe_rows: int = 2, precision: str = "32-true") -> int:
    """Bytes autograd saves for backward in one forward pass on ``batch`` (one rank's batch),
    measured on its first ``probe_rows`` rows and scaled linearly to its rows. Under a mixed
    ``precision`` the pass runs under autocast, as training would: most saved tensors are then
    16-bit.

    >>> measure_activation_bytes(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh()), torch.zeros(4, 8))
    256
    """
    inputs = batch[0] if isinstance(batch, (tuple, list)) else batch
    rows = inputs.shape[0]
    if rows <= 2 * probe_rows:
        return _saved_bytes(model, inputs, precision)
    # Two probes, to split what grows with the rows from what does not (autocast's 16-bit copies
    # of the weights, saved once per forward): bytes = fixed + per_row * rows.
    small = _saved_bytes(model, inputs[:probe_rows], precision)
    large = _saved_bytes(model, inputs[: 2 * probe_rows], precision)
    per_row = (large - small) / probe_rows
    return max(0, round(small - per_row * probe_rows + per_row * rows))


def _saved_bytes(model: nn.Module, inputs: torch.Tensor, precision: str) -> int:
    """Bytes autograd saves for backward in one forward pass on ``inputs``."""
    # Weights saved for backward are counted as parameters, not as activations.
    param_ptrs = {p.data_ptr() for p in model.parameters()}
    seen: set[tuple[int, int]] = set()
    total = 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal total
        key = (tensor.data_ptr(), tensor.numel())
        if tensor.data_ptr() not in param_ptrs and key not in seen:  # views of one buffer count once
            seen.add(key)
            total += tensor.numel() * tensor.element_size()
        return tensor

    with (
        _buffers_kept(model),
        _autocast_like_training(model, precision),
        torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor),
    ):
        model(inputs)
    return total


def _autocast_like_training(model: nn.Module, precision: str) -> Any:
    """The autocast the Trainer runs forward under for ``precision`` (none unless mixed)."""
    if precision not in MIXED:
        return contextlib.nullcontext()
    device_type = next((p.device.type for p in model.parameters()), "cpu")
    dtype = torch.bfloat16 if precision.startswith("bf16") else torch.float16
    return torch.autocast(device_type=device_type, dtype=dtype)


@contextlib.contextmanager
def _buffers_kept(model: nn.Module) -> Iterator[None]:
    """Restores buffers (batch norm's running statistics) after a measuring forward pass."""
    saved = [(buffer, buffer.detach().clone()) for buffer in model.buffers()]
    try:
        yield
    finally:
        with torch.no_grad():
            for buffer, copy in saved:
                buffer.copy_(copy)
