"""Lightning's form of ``ModelParallelStrategy``: ``ModelParallelStrategy(data_parallel_size=,
tensor_parallel_size=, save_distributed_checkpoint=)``, and Lightning Fabric's, whose first argument
``parallelize_fn`` is called as ``parallelize_fn(module, device_mesh)`` when ``fabric.setup`` places the
module (Fabric's ``ModelParallelStrategy.setup_module``), where the Trainer's module does it in ``configure_model``.

There the strategy applies no parallelism itself: it builds a ``DeviceMesh`` named
``("data_parallel", "tensor_parallel")``, shows it to the module as ``self.device_mesh``, and the
module's ``configure_model`` applies ``parallelize_module`` on ``device_mesh["tensor_parallel"]``
and ``fully_shard`` on ``device_mesh["data_parallel"]`` (torchtitan's ``parallelize`` functions,
Lightning's ``examples/pytorch/tensor_parallel``). trainmesh's own form (``tp=``, ``dp_shard=``,
...) applies them after ``configure_model``, in its written order; the two forms are told apart by
the arguments given, and a module in Lightning's form is trained as Lightning trains it: on the
same ranks' layout (data-parallel outer, tensor-parallel inner), with the same data shares (one
per data-parallel rank) and the checkpoint kind ``save_distributed_checkpoint`` asks for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

NAMES = ("data_parallel_size", "tensor_parallel_size", "save_distributed_checkpoint")
MESH_NAMES = ("data_parallel", "tensor_parallel")


@dataclass(frozen=True)
class LightningForm:
    """What Lightning's arguments asked for (``"auto"`` resolved when the processes are known)."""

    data_parallel_size: int | str = "auto"
    tensor_parallel_size: int | str = "auto"
    save_distributed_checkpoint: bool = True
    parallelize_fn: Callable[[nn.Module, Any], nn.Module] | None = None  # Fabric's form


def lightning_form(kwargs: dict[str, Any], parallelize_fn: Any = None) -> LightningForm | None:
    """Lightning's arguments given to trainmesh's ``ModelParallelStrategy`` (Fabric's ``parallelize_fn``
    with them); None where none was.

    >>> lightning_form({"tensor_parallel_size": 2}).tensor_parallel_size
    2
    >>> lightning_form({}) is None
    True
    """
    if parallelize_fn is not None:
        kwargs = {**kwargs, "parallelize_fn": parallelize_fn}
    for name in kwargs:
        if name not in (*NAMES, "parallelize_fn"):
            raise TypeError(f"ModelParallelStrategy() got an unexpected keyword argument {name!r}")
    if not kwargs:
        return None
    for name in NAMES[:2]:
        size = kwargs.get(name, "auto")
        if size != "auto" and not (isinstance(size, int) and not isinstance(size, bool) and size >= 1):
            raise ValueError(f"ModelParallelStrategy({name}={size!r}): give a positive number of processes or 'auto'")
    return LightningForm(**kwargs)


def refuse_fabric_form(form: LightningForm | None) -> None:
    """Fabric's ``parallelize_fn`` given to a Trainer: Lightning's Trainer-side ``ModelParallelStrategy``
    does not take it (its words, a TypeError); its module parallelizes itself in ``configure_model``."""
    if form is not None and form.parallelize_fn is not None:
        raise TypeError(
            "ModelParallelStrategy.__init__() got an unexpected keyword argument 'parallelize_fn' (Lightning's "
            "Trainer-side ModelParallelStrategy takes data_parallel_size=, tensor_parallel_size= and "
            "save_distributed_checkpoint=: the LightningModule parallelizes itself in configure_model on "
            "self.device_mesh. parallelize_fn is Lightning Fabric's form: use it with Fabric, or move its body "
            "into configure_model)"
        )


def check_not_mixed(form: LightningForm | None, own: dict[str, Any]) -> None:
    """Lightning's sizes beside trainmesh's (``tp=``, ``dp_shard=``, ...): which layout is meant
    would be a guess, and the module would be parallelized once by each."""
    defaults = {"pp": 1, "tp": 1, "dp_shard": -1, "dp_replicate": 1}
    given = sorted(name for name, value in own.items() if value != defaults.get(name))
    if form is not None and given:
        raise ValueError(
            f"ModelParallelStrategy got Lightning's data_parallel_size/tensor_parallel_size and trainmesh's "
            f"{', '.join(given)}: Lightning's form leaves the parallelisms to configure_model on "
            "self.device_mesh, trainmesh's applies them itself. Give one form's arguments"
        )


def resolved_sizes(form: LightningForm, *, world_size: int, num_nodes: int) -> tuple[int, int]:
    """(data-parallel, tensor-parallel) sizes as Lightning resolves ``"auto"``: data parallel
    across nodes, tensor parallel within a node; their product must be the world size.

    >>> resolved_sizes(LightningForm(), world_size=8, num_nodes=2)
    (2, 4)
    """
    dp = num_nodes if form.data_parallel_size == "auto" else int(form.data_parallel_size)
    tp = world_size // num_nodes if form.tensor_parallel_size == "auto" else int(form.tensor_parallel_size)
    if dp * tp != world_size:
        # Lightning's words (its _setup_device_mesh), with the way out
        raise RuntimeError(
            f"The sizes `data_parallel_size={dp}` and `tensor_parallel_size={tp}` multiplied should equal the "
            f"world size ({world_size}). Choose sizes whose product is devices x num_nodes"
        )
    return dp, tp


def build_device_mesh(device_type: str, dp: int, tp: int) -> Any:
    """Lightning's mesh: ``("data_parallel", "tensor_parallel")``, row-major over the ranks, as
    trainmesh's own ``dp_shard`` x ``tp`` mesh lays them out (so the data shares agree)."""
    from trainmesh.strategies.mesh_groups import shared_device_mesh

    # made once per layout, as trainmesh's own mesh (mesh_groups.py: runs in one process group)
    return shared_device_mesh(device_type, (dp, tp), MESH_NAMES)


def parallelized(module: nn.Module, form: LightningForm, device_mesh: Any) -> nn.Module:
    """Fabric's form: what ``parallelize_fn(module, device_mesh)`` returns, checked as Fabric checks it
    (a module wrapped in FSDP1 refused first); the Trainer's form: the module, which ``configure_model``
    parallelized."""
    if form.parallelize_fn is None:
        return module
    from torch.distributed.fsdp import FullyShardedDataParallel

    if any(isinstance(layer, FullyShardedDataParallel) for layer in module.modules()):  # Fabric's words
        raise TypeError(
            "Found modules that are wrapped with `torch.distributed.fsdp.FullyShardedDataParallel`."
            " The `ModelParallelStrategy` only supports the new FSDP2 APIs in PyTorch >= 2.4."
        )
    module = form.parallelize_fn(module, device_mesh)
    if not isinstance(module, nn.Module):
        raise TypeError(f"The `parallelize_fn` must return a `nn.Module` instance, but got: {type(module).__name__}")
    return module


def place(
    module: nn.Module, form: LightningForm, mesh: Any, precision: Any, device: torch.device, *, data_parallel: int
) -> nn.Module:
    """The module its ``configure_model`` (or Fabric's ``parallelize_fn`` on ``mesh``) parallelized, placed
    as Lightning's strategy places it: checked, converted to the run's precision, its layers left on the
    meta device initialised."""
    from trainmesh.strategies import checkpoint as checkpoints

    module = parallelized(module, form, mesh)
    check_module_parallelized(module, data_parallel, by_fabric=form.parallelize_fn is not None)
    materialize(module, device)
    module = precision.convert_module(module, device=device)
    checkpoints.import_distributed_checkpoint()  # its saves are DCP's: not inside the first
    return module


def materialize(module: nn.Module, device: torch.device) -> None:
    """Lightning's materialization of a module built on the meta device: allocated whole, then
    each layer's ``reset_parameters()`` in module order (the random numbers Lightning draws, so a
    seeded run initialises the same weights); layers without one are named in Lightning's warning.
    trainmesh's own form replays the layers' initialisers instead (strategies/materialize.py)."""
    import itertools

    from trainmesh.utilities.rank_zero import rank_zero_warn

    if not any(t.is_meta for t in itertools.chain(module.parameters(), module.buffers())):
        return
    module.to_empty(device=device)
    uninitialized = set()
    for layer in module.modules():
        if not any(True for _ in itertools.chain(layer.parameters(recurse=False), layer.buffers(recurse=False))):
            continue
        if callable(reset := getattr(layer, "reset_parameters", None)):
            reset()
        else:
            uninitialized.add(type(layer).__name__)
    if uninitialized:
        rank_zero_warn(
            "Parameter initialization incomplete. The following modules have parameters or buffers with uninitialized"
            " memory because they don't define a `reset_parameters()` method for re-initialization:"
            f" {', '.join(uninitialized)}"
        )


def whole(checkpoint: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """``checkpoint`` with the DTensors of its ``keys`` entries made whole, on every rank (each
    ``full_tensor`` is a collective, in the same order everywhere): the one file Lightning writes
    with ``save_distributed_checkpoint=False``."""
    from trainmesh.utilities.collections import apply_to_tensors
    from trainmesh.utilities.dtensors import is_dtensor

    def whole_tensor(tensor: Any) -> Any:
        return tensor.full_tensor() if is_dtensor(tensor) else tensor

    return {key: apply_to_tensors(value, whole_tensor) if key in keys else value for key, value in checkpoint.items()}


def check_module_parallelized(module: nn.Module, dp: int, *, by_fabric: bool = False) -> None:
    """The module must define ``configure_model`` (Lightning's check). With several data-parallel
    ranks, its ``configure_model`` must have sharded it over
    ``device_mesh["data_parallel"]``: otherwise no gradient is reduced across them and each rank
    trains its own weights (Lightning runs such a module without a word; here it stops first)."""
    from torch.distributed.fsdp import FSDPModule

    where = "parallelize_fn" if by_fabric else f"{type(module).__name__}.configure_model"
    mesh = "device_mesh" if by_fabric else "self.device_mesh"
    if not by_fabric and not _overrides_configure_model(module):  # Lightning's error, in its words
        raise TypeError(
            "When using the ModelParallelStrategy, you are required to override the `configure_model()` hook in"
            " the LightningModule and apply parallelization there."
        )
    if dp > 1 and not any(isinstance(m, FSDPModule) for m in module.modules()):
        raise ValueError(
            f"ModelParallelStrategy(data_parallel_size={dp}): {where} applied no fully_shard (or replicate) on "
            f"{mesh}['data_parallel'], so the data-parallel ranks would each train their own weights. Apply "
            f"fully_shard(module, mesh={mesh}['data_parallel']) in {where.split('.')[-1]}, or use data_parallel_size=1"
        )


def _overrides_configure_model(module: nn.Module) -> bool:
    """Whether the program's class defines it (not a Module base's, whose hook does nothing)."""
    for cls in type(module).__mro__:
        if "configure_model" in vars(cls):
            return not cls.__module__.startswith(("trainmesh.", "lightning.", "pytorch_lightning."))
    return False
