"""A value given to ``self.log`` as the log collector keeps it (a scalar tensor, a number, a metric
object), and a logged metric's value as Lightning hands it out (``callback_metrics``, ``logged_metrics``, the
progress bar): its dtype, and Python floats read from the device with one copy per device."""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import torch


def read_floats(values: Mapping[str, torch.Tensor | float]) -> dict[str, float]:
    """``values`` as Python floats, in their order, with one device-to-host copy per device
    rather than one per value: on a GPU each ``.item()`` waits for the device to catch up."""
    out: dict[str, float] = dict.fromkeys(values, 0.0)  # the order of ``values``, filled below
    on_device: dict[torch.device, dict[str, torch.Tensor]] = {}
    for name, value in values.items():
        if isinstance(value, torch.Tensor) and value.device.type != "cpu":
            on_device.setdefault(value.device, {})[name] = value
        elif isinstance(value, torch.Tensor):
            out[name] = float(value)
        else:  # a number: Lightning's is a tensor of its dtype (float32), which the loggers read back
            out[name] = float(torch.tensor(value, dtype=lightning_dtype()))
    for tensors in on_device.values():
        # float64 holds every float32/bf16/int32 value exactly: the same floats as float(value).
        numbers = torch.stack([t.detach().reshape(()).to(torch.float64) for t in tensors.values()]).tolist()
        out.update(zip(tensors, numbers))
    return out


def lightning_dtype(wide: bool = False) -> torch.dtype:
    """The dtype Lightning gives a logged value (2.6.6, ``logger_connector/result.py``: its
    ``_get_default_dtype`` and ``_ResultMetric.update``): float32 (the default dtype, no lower
    than float32), or float64 where the default dtype is float64 or ``wide`` (a float64 tensor was
    logged: its float32 accumulator promotes to float64)."""
    return torch.float64 if wide or torch.get_default_dtype() == torch.float64 else torch.float32


def step_tensor(value: torch.Tensor | float) -> torch.Tensor:
    """A step value as ``callback_metrics`` hands it out: the tensor logged (no device sync), in
    float32 or float64 as Lightning converts it (a float16, bfloat16 or integer tensor becomes
    float32), or for a logged number a tensor of Lightning's dtype."""
    if isinstance(value, torch.Tensor):
        value = value.detach()
        return value if value.dtype in (torch.float32, torch.float64) else value.to(lightning_dtype())
    return torch.tensor(value, dtype=lightning_dtype())


def metric_tensor(value: Any, *, wide: bool = False) -> torch.Tensor:
    """A metric as ``callback_metrics`` / ``logged_metrics`` hand it out: a scalar tensor, as
    Lightning programs expect (they call ``.item()``). A step value stays where it is (no device
    sync); a reduced epoch value (a float) becomes a tensor of Lightning's dtype: float32, or
    float64 where a float64 tensor was logged under the name (``wide``) or that is the default."""
    if isinstance(value, torch.Tensor):
        return step_tensor(value)
    return torch.tensor(float(value), dtype=lightning_dtype(wide))


def is_metric_object(value: Any) -> bool:
    # Duck-typed so torchmetrics stays optional.
    return (
        not isinstance(value, torch.Tensor)
        and hasattr(value, "compute")
        and hasattr(value, "update")
        and hasattr(value, "reset")
    )


def as_scalar(name: str, value: Any) -> torch.Tensor | float:
    """A logged value as a detached 0-dim tensor, or a Python float for a number (making a
    tensor of it costs more than the rest of self.log; it is made only where one is needed)."""
    if isinstance(value, torch.Tensor):
        if type(value) is not torch.Tensor and hasattr(value, "full_tensor"):  # (a failed hasattr is slow)
            value = value.full_tensor()  # a DTensor (tensor parallel, loss_parallel): its value, as a plain tensor
        if value.numel() != 1:
            raise ValueError(
                f"self.log({name!r}, ...) got a tensor of shape {tuple(value.shape)}; log a scalar "
                "(reduce it with .mean() or log each element under its own name)"
            )
        scalar: torch.Tensor = value.detach().reshape(())
        return scalar
    # Lightning's numbers.Number: a bool (logged as 1.0 / 0.0) and NumPy's scalars (np.float32) too
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, Mapping):
        raise ValueError(  # Lightning 2.6's ValueError; 1.x's nested metric named with what to do instead
            f"`self.log({name}, {value!r})` was called, but `dict` values cannot be logged (Lightning 2.x refuses "
            "them too; pytorch-lightning 1.x logged the dict as one nested metric, as trainmesh does for a module "
            "written for 1.x: one defining `training_step_end`, `training_epoch_end`, ...). "
            f"Log each value under its own name: self.log_dict({{'{name}/<key>': value, ...}})"
        )
    raise ValueError(  # Lightning's type for it, which a program may catch
        f"self.log({name!r}, {value!r}): the value must be a number, a scalar tensor or a torchmetrics Metric"
    )


def as_tensor(value: torch.Tensor | float) -> torch.Tensor:
    # A number as Lightning's self.log makes it: a tensor of the default dtype (float32), so that a
    # reduced (sync_dist) or split-batch step value is Lightning's float32 number, not a float64 one.
    return value if isinstance(value, torch.Tensor) else torch.tensor(value, dtype=lightning_dtype())
