"""Bytes of training state this process holds: parameters, gradients, optimizer state; and
Lightning's ``utilities.memory`` helpers (out-of-memory recognition, detaching collections).

Sharded tensors (DTensor) count only their local shard: the figure is what this rank stores.
"""

from __future__ import annotations

import gc
import io
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from trainmesh.utilities.collections import apply_to_tensors


def tensor_bytes(tensor: torch.Tensor) -> int:
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return local.numel() * local.element_size()


def local_state_bytes(module: nn.Module, optimizers: Iterable[Any]) -> dict[str, int]:
    """``{"parameters", "gradients", "optimizer_state"}`` bytes held by this process.

    >>> layer = nn.Linear(2, 2)
    >>> local_state_bytes(layer, [])["parameters"]
    24
    """
    params = list(module.parameters())
    state = 0
    for optimizer in optimizers:
        inner = getattr(optimizer, "optimizer", optimizer)
        inner = getattr(inner, "optim", inner)  # ZeroRedundancyOptimizer keeps its shard's optimizer here
        for entry in inner.state.values():
            state += sum(tensor_bytes(v) for v in entry.values() if isinstance(v, torch.Tensor) and v.dim() > 0)
    return {
        "parameters": sum(tensor_bytes(p) for p in params),
        "gradients": sum(tensor_bytes(p.grad) for p in params if p.grad is not None),
        "optimizer_state": state,
    }


def recursive_detach(in_dict: Any, to_cpu: bool = False) -> Any:
    """Every tensor in a (nested) collection detached, and moved to the CPU with ``to_cpu``."""
    return apply_to_tensors(in_dict, lambda t: t.detach().cpu() if to_cpu else t.detach())


def _single_message(exception: BaseException) -> str | None:
    if isinstance(exception, RuntimeError) and len(exception.args) == 1 and isinstance(exception.args[0], str):
        return exception.args[0]
    return None


def is_cuda_out_of_memory(exception: BaseException) -> bool:
    message = _single_message(exception)
    return message is not None and "CUDA" in message and "out of memory" in message


def is_cudnn_snafu(exception: BaseException) -> bool:
    # cuDNN reports some allocation failures as an unsupported call (pytorch issue 4107).
    message = _single_message(exception)
    return message is not None and "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED." in message


def is_out_of_cpu_memory(exception: BaseException) -> bool:
    message = _single_message(exception)
    return message is not None and "DefaultCPUAllocator: can't allocate memory" in message


def is_oom_error(exception: BaseException) -> bool:
    """Whether an exception is torch running out of CUDA or CPU memory (what batch-size search catches)."""
    return is_cuda_out_of_memory(exception) or is_cudnn_snafu(exception) or is_out_of_cpu_memory(exception)


def garbage_collection_cuda() -> None:
    """Collect Python garbage, then return the CUDA cache to the driver (an OOM doing so is swallowed)."""
    gc.collect()
    try:
        torch.cuda.empty_cache()
    except RuntimeError as exception:
        if not is_oom_error(exception):
            raise


def get_model_size_mb(model: nn.Module) -> float:
    """Megabytes (10**6 bytes) that ``torch.save`` writes for ``model.state_dict()`` (pytorch-lightning
    1.9.5's, which 2.0 removed).

    >>> round(get_model_size_mb(nn.Linear(10, 10)), 6)
    0.002277
    """
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return buffer.getbuffer().nbytes / 1e6
