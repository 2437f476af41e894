"""Lightning's precision plugins, as values: ``Trainer(plugins=[MixedPrecision("bf16-mixed", "cpu")])``
is ``Trainer(precision="bf16-mixed")`` (trainmesh's one precision setting, ``precision.py``, applies it).

>>> HalfPrecision("bf16-true").precision, DoublePrecision().precision
('bf16-true', '64-true')
"""

from __future__ import annotations

from typing import Any

import torch

from trainmesh.utilities.exceptions import MisconfigurationException
from trainmesh.utilities.refusal import refused_class


class Precision:
    """Full precision (``"32-true"``); the base of the precision plugins.

    Its methods are Lightning Fabric's precision hooks with Fabric's defaults for the plugin's setting, for a
    plugin of the program's own class given to ``Fabric(plugins=...)`` (whose overrides Fabric calls, and may
    call these through ``super()``): trainmesh.fabric.precision."""

    precision: str = "32-true"
    scaler: Any = None  # MixedPrecision's gradient scaler ("16-mixed"), as trainer.precision_plugin gives it

    def _setting(self) -> Any:
        from trainmesh.fabric.precision import FabricPrecision
        from trainmesh.precision import Precision as Setting

        device = str(getattr(self, "device", "cpu")).split(":")[0]
        return FabricPrecision(Setting(self.precision, device_type=device, scaler=self.scaler))

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        dtype = self._setting().precision.param_dtype
        return module.to(dtype) if self.precision.endswith("-true") and self.precision != "32-true" else module

    def tensor_init_context(self) -> Any:
        return self._setting().tensor_init_context()

    def module_init_context(self) -> Any:
        return self._setting().module_init_context()

    def forward_context(self) -> Any:
        return self._setting().forward_context()

    def convert_input(self, data: Any) -> Any:
        return self._setting().convert_input(data)

    def convert_output(self, data: Any) -> Any:
        return self._setting().convert_output(data)

    def pre_backward(self, tensor: torch.Tensor, module: Any) -> Any:
        return None

    def backward(self, tensor: torch.Tensor, model: Any, *args: Any, **kwargs: Any) -> None:
        (self.scaler.scale(tensor) if self.scaler is not None else tensor).backward(*args, **kwargs)

    def post_backward(self, tensor: torch.Tensor, module: Any) -> Any:
        return None

    def optimizer_step(self, optimizer: Any, **kwargs: Any) -> Any:
        if self.scaler is None:
            return optimizer.step(**kwargs)
        output = self.scaler.step(optimizer, **kwargs)  # Fabric's MixedPrecision: skipped on inf/nan gradients
        self.scaler.update()
        return output

    def main_params(self, optimizer: torch.optim.Optimizer) -> Any:
        for group in optimizer.param_groups:
            yield from group["params"]

    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)


class MixedPrecision(Precision):
    """Autocast to float16 (with a gradient scaler: ``scaler``, else torch's with its defaults) or
    bfloat16, parameters kept in float32. Given as a plugin it runs as given, as Lightning's: on the CPU,
    ``MixedPrecision("16-mixed", "cpu")`` is float16 autocast with a GradScaler, where
    ``Trainer(precision="16-mixed")`` is "bf16-mixed"."""

    def __init__(self, precision: str, device: str, scaler: Any = None) -> None:
        if precision not in ("16-mixed", "bf16-mixed"):
            raise ValueError(
                f"`Passed `{type(self).__name__}(precision={precision!r})`. Precision must be '16-mixed' or 'bf16-mixed'."
            )
        if scaler is None and precision == "16-mixed":
            # Lightning's makes it here too: trainer.precision_plugin.scaler is the one the run steps with
            scaler = torch.amp.GradScaler(device=device)
        if scaler is not None and precision == "bf16-mixed":
            raise MisconfigurationException(f"`precision='bf16-mixed'` does not use a scaler, found {scaler}.")
        self.precision, self.device, self.scaler = precision, device, scaler


class HalfPrecision(Precision):
    """Parameters and computation in float16 or bfloat16 (``"16-true"`` / ``"bf16-true"``)."""

    def __init__(self, precision: str = "16-true") -> None:
        if precision not in ("16-true", "bf16-true"):
            raise ValueError(f"HalfPrecision(precision={precision!r}): use '16-true' or 'bf16-true'")
        self.precision = precision


class DoublePrecision(Precision):
    """Parameters and computation in float64."""

    precision = "64-true"


class FSDPPrecision(Precision):
    """A precision under FSDP (trainmesh's FSDP strategy takes its mixed-precision policy from the one setting)."""

    def __init__(self, precision: str, scaler: Any = None) -> None:
        supported = ("32-true", "16-true", "bf16-true", "16-mixed", "bf16-mixed")
        if precision not in supported:
            raise ValueError(
                f"`precision={precision!r})` is not supported in FSDP. `precision` must be one of: {supported}."
            )
        if scaler is not None:
            raise ValueError("FSDPPrecision(scaler=...): trainmesh makes the scaler itself; leave scaler out")
        self.precision = precision


def _refused(name: str, reason: str) -> type:
    return refused_class(name, reason, module=__name__)


_ONE_SETTING = "use Trainer(precision='16-mixed' | 'bf16-mixed' | '16-true' | 'bf16-true' | '64-true') instead"
BitsandbytesPrecision = _refused(
    "BitsandbytesPrecision", f"quantized training through bitsandbytes is not supported by trainmesh; {_ONE_SETTING}"
)
TransformerEnginePrecision = _refused(
    "TransformerEnginePrecision", f"NVIDIA Transformer Engine's FP8 is not supported by trainmesh; {_ONE_SETTING}"
)
DeepSpeedPrecision = _refused(
    "DeepSpeedPrecision", f"trainmesh has no DeepSpeed strategy (use strategy='fsdp' or 'zero1'); {_ONE_SETTING}"
)
XLAPrecision = _refused("XLAPrecision", f"TPUs (torch_xla) are not supported by trainmesh; {_ONE_SETTING}")

# Lightning 1.x's and 2.0/2.1's names of these classes (2.6 keeps them, warning): each makes today's class.


def mixed_precision_of(precision: Any = 16, device: str = "cuda", scaler: Any = None) -> MixedPrecision:
    """Lightning 1.x's mixed precision arguments (16 or "bf16", device, scaler) as 2.x's ``MixedPrecision``;
    2.x's spellings ("16-mixed") as Lightning 2.6's deprecated ``MixedPrecisionPlugin`` takes them."""
    if str(precision) in ("16-mixed", "bf16-mixed"):
        return MixedPrecision(str(precision), device, scaler)
    name = "bf16-mixed" if str(precision).startswith("bf16") else "16-mixed"
    if scaler is None and name == "16-mixed":
        # pytorch-lightning 1.9.5 makes torch.cuda.amp.GradScaler() whatever the device: on a machine
        # without CUDA it disables itself (torch warns), so 1.x's fp16 on the CPU trains unscaled
        scaler = torch.amp.GradScaler("cuda")
    return MixedPrecision(name, device, scaler)


from trainmesh.utilities.refusal import renamed_class  # noqa: E402

PrecisionPlugin = renamed_class("PrecisionPlugin", "Precision() (or precision='32-true')", Precision, module=__name__)
DoublePrecisionPlugin = renamed_class(
    "DoublePrecisionPlugin", "DoublePrecision() (or precision='64-true')", DoublePrecision, module=__name__
)
MixedPrecisionPlugin = renamed_class(
    "MixedPrecisionPlugin", "MixedPrecision('16-mixed', device)", mixed_precision_of, module=__name__
)
DeepSpeedPrecisionPlugin = _refused("DeepSpeedPrecisionPlugin", DeepSpeedPrecision.__refused__)  # type: ignore[attr-defined]
FSDPPrecisionPlugin = renamed_class("FSDPPrecisionPlugin", "FSDPPrecision", FSDPPrecision, module=__name__)


def _fsdp_mixed(precision: Any, device: str | None = None, scaler: Any = None) -> FSDPPrecision:
    # Lightning 2.0's FSDPMixedPrecisionPlugin(precision, device, scaler): the device is FSDP's own
    return FSDPPrecision(precision, scaler)


FSDPMixedPrecisionPlugin = renamed_class("FSDPMixedPrecisionPlugin", "FSDPPrecision", _fsdp_mixed, module=__name__)
HalfPrecisionPlugin = renamed_class("HalfPrecisionPlugin", "HalfPrecision", HalfPrecision, module=__name__)
BitsandbytesPrecisionPlugin = _refused("BitsandbytesPrecisionPlugin", BitsandbytesPrecision.__refused__)  # type: ignore[attr-defined]
TransformerEnginePrecisionPlugin = _refused(
    "TransformerEnginePrecisionPlugin",
    TransformerEnginePrecision.__refused__,  # type: ignore[attr-defined]
)
XLAPrecisionPlugin = _refused("XLAPrecisionPlugin", XLAPrecision.__refused__)  # type: ignore[attr-defined]

__all__ = [
    "BitsandbytesPrecision",
    "BitsandbytesPrecisionPlugin",
    "DeepSpeedPrecision",
    "DeepSpeedPrecisionPlugin",
    "DoublePrecision",
    "DoublePrecisionPlugin",
    "FSDPMixedPrecisionPlugin",
    "FSDPPrecision",
    "FSDPPrecisionPlugin",
    "HalfPrecision",
    "HalfPrecisionPlugin",
    "MixedPrecision",
    "MixedPrecisionPlugin",
    "Precision",
    "PrecisionPlugin",
    "TransformerEnginePrecision",
    "TransformerEnginePrecisionPlugin",
    "XLAPrecision",
    "XLAPrecisionPlugin",
]
