"""What a Lightning module offers besides its hooks: freezing, printing once, exporting, and the
properties programs read (``dtype``, ``example_input_array``, ``strict_loading``, ``device_mesh``).

Kept apart from :mod:`trainmesh.module` so that the hook-facing class stays small; ``Module``
inherits these.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainmesh.module_host import host_of
from trainmesh.utilities.rank_zero import rank_zero_deprecation


def trainer_side_properties(cls: type) -> list[str]:
    """The properties ``cls`` and its trainmesh bases define (``trainer``, ``hparams``, ...): TorchScript
    must not compile them, since they read the Trainer or plain Python state."""
    return sorted(
        {
            name
            for klass in cls.__mro__
            if klass.__module__.startswith("trainmesh.")
            for name, value in vars(klass).items()
            if isinstance(value, property)
        }
    )


class ModuleUtilities(nn.Module):
    """Lightning's conveniences of a ``LightningModule`` that do not involve the loop.

    >>> class Net(ModuleUtilities):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.layer = nn.Linear(2, 2)
    >>> net = Net()
    >>> _ = net.freeze()
    >>> any(p.requires_grad for p in net.parameters()), net.training
    (False, False)
    """

    # The module's answer to a checkpoint that lacks or adds weights (Lightning's default: strict).
    strict_loading: bool = True
    # A batch for ModelSummary's shapes and for to_torchscript(method="trace"); None until set.
    example_input_array: Any = None

    @property
    def device_mesh(self) -> Any:
        """The ``DeviceMesh`` Lightning's form of ``ModelParallelStrategy`` shows the module (its
        ``configure_model`` parallelizes on it); None under every other strategy, as Lightning's."""
        return getattr(self, "_device_mesh", None)

    # Lightning Fabric's handle, for modules Fabric runs; trainmesh never sets it.
    fabric: Any = None

    @property
    def dtype(self) -> torch.dtype:
        """The floating dtype of the module's parameters (the default dtype if it has none)."""
        for tensor in (*self.parameters(), *self.buffers()):
            if tensor.is_floating_point():
                return tensor.dtype
        return torch.get_default_dtype()

    def freeze(self) -> ModuleUtilities:
        """Every parameter without gradients, and evaluation mode."""
        for param in self.parameters():
            param.requires_grad = False
        return self.eval()

    def unfreeze(self) -> ModuleUtilities:
        """Every parameter with gradients again, and training mode."""
        for param in self.parameters():
            param.requires_grad = True
        return self.train()

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on global rank 0 only (through the progress bar when it draws one)."""
        host_of(self).print(self, args, kwargs)  # under Fabric, Lightning's error on rank 0 (module_fabric.py)

    @contextlib.contextmanager
    def toggled_optimizer(self, optimizer: Any) -> Iterator[None]:
        """``toggle_optimizer`` for the block, ``untoggle_optimizer`` after it."""
        owner: Any = self  # toggle_optimizer is the Module's (it needs the Trainer's optimizers)
        owner.toggle_optimizer(optimizer)
        try:
            yield
        finally:
            owner.untoggle_optimizer(optimizer)

    @torch.no_grad()
    def to_torchscript(
        self, file_path: str | Path | None = None, method: str = "script", example_inputs: Any = None, **kwargs: Any
    ) -> Any:
        """The module as TorchScript (``method="script"`` or ``"trace"`` with ``example_inputs``, by
        default ``example_input_array``), saved to ``file_path`` when given; the mode is restored."""
        rank_zero_deprecation(  # Lightning 2.6.6's warning, in its words
            "`LightningModule.to_torchscript` has been deprecated in v2.7 and will be removed in v2.8. "
            "TorchScript is deprecated in PyTorch. Use `torch.export.export()` for model exporting instead. "
            "See https://pytorch.org/docs/stable/export.html for more information."
        )
        was_training = self.training
        object.__setattr__(self, "_jit_is_scripting", True)
        try:
            if method == "script":
                scripted = torch.jit.script(self.eval(), **kwargs)
            elif method == "trace":
                inputs = self.example_input_array if example_inputs is None else example_inputs
                if inputs is None:
                    raise ValueError(  # Lightning's words
                        "Choosing method=`trace` requires either `example_inputs` or `model.example_input_array` to "
                        "be defined."
                    )
                scripted = torch.jit.trace(self.eval(), example_inputs=inputs, **kwargs)
            else:
                raise ValueError(  # Lightning's words
                    f"The 'method' parameter only supports 'script' or 'trace', but value given was: {method}"
                )
        finally:
            object.__setattr__(self, "_jit_is_scripting", False)
            self.train(was_training)
        if file_path is not None:
            torch.jit.save(scripted, str(file_path))
        return scripted

    @torch.no_grad()
    def to_onnx(self, file_path: str | Path, input_sample: Any = None, **kwargs: Any) -> Any:
        """Export to ONNX through ``torch.onnx.export`` with ``input_sample`` (by default
        ``example_input_array``); torch's exporter needs its optional ``onnx`` packages installed."""
        sample = self.example_input_array if input_sample is None else input_sample
        if sample is None:
            raise ValueError("to_onnx needs input_sample, or example_input_array set on the module")
        was_training = self.training
        try:
            return torch.onnx.export(self.eval(), sample, str(file_path), **kwargs)
        finally:
            self.train(was_training)

    def to_tensorrt(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            "to_tensorrt compiles for NVIDIA TensorRT, which needs torch_tensorrt and a CUDA device; "
            "neither is part of trainmesh's set-up: export with to_torchscript or to_onnx instead"
        )

    # ---- Lightning 1.x's compile helpers, which 2.0 removed ---------------------------------
    @classmethod
    def from_compiled(cls, model: Any) -> Any:
        """``torch.compile(module)`` checked to wrap a ``cls`` and handed back as it is: trainmesh's
        ``fit`` takes the compiled module itself (compiled where the strategy compiles), where
        pytorch-lightning 1.9.5 rebound the module's ``forward`` and steps (nothing is rebound here).

        Examples:
            >>> ModuleUtilities.from_compiled(torch.nn.Linear(1, 1))  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            ValueError: `model` is required to be a `OptimizedModule`. Found a `Linear` instead.
        """
        if not _is_compiled(model):
            raise ValueError(
                f"`model` is required to be a `OptimizedModule`. Found a `{type(model).__name__}` instead."
            )
        if not isinstance(model._orig_mod, cls):
            raise ValueError(
                f"`model` is expected to be a compiled {cls.__name__}. Found a `{type(model._orig_mod).__name__}` instead"
            )
        return model

    @classmethod
    def to_uncompiled(cls, model: Any) -> Any:
        """The module a ``torch.compile`` wraps (1.9.5's ``to_uncompiled``); a module that is not compiled
        raises, as in 1.9.5."""
        if _is_compiled(model):
            return model._orig_mod
        raise ValueError("`model` is required to be a compiled LightningModule (what torch.compile returns)")


def _is_compiled(model: Any) -> bool:
    """``model`` is what ``torch.compile`` returns (torch's dynamo, slow to import, is only asked once a
    compile has imported it: before that nothing can be compiled)."""
    if "torch._dynamo" not in sys.modules:
        return False
    return isinstance(model, torch._dynamo.eval_frame.OptimizedModule)
