"""One precision setting turned into autocast, a gradient scaler, and dtype conversions."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import nn

from trainmesh.utilities.collections import apply_to_tensors
from trainmesh.utilities.exceptions import MisconfiguredValue
from trainmesh.utilities.placement import place_tensors
from trainmesh.utilities.suggestions import did_you_mean

PRECISIONS = ("32-true", "bf16-mixed", "16-mixed", "bf16-true", "16-true", "64-true")
# Spellings from Lightning 1.x and 2.x that users carry over.
_ALIASES = {
    "32": "32-true",
    32: "32-true",
    "16": "16-mixed",
    16: "16-mixed",
    "bf16": "bf16-mixed",
    "64": "64-true",
    64: "64-true",
}

_NO_AUTOCAST = contextlib.nullcontext()
_MIXED = ("bf16-mixed", "16-mixed")  # fp32 parameters, computed under autocast


def normalize_precision(precision: str | int) -> str:
    name = _ALIASES.get(precision, precision)
    if name not in PRECISIONS:
        raise ValueError(
            f"precision={precision!r} is not known; choose one of {', '.join(PRECISIONS)} (or 32 / 16 / 'bf16')."
            + did_you_mean(precision, [*PRECISIONS, "bf16"])
        )
    return str(name)


class Precision:
    """Autocast, loss scaling and dtype casts for one precision setting.

    >>> p = Precision("bf16-mixed", device_type="cpu")
    >>> with p.autocast():
    ...     y = torch.nn.Linear(2, 2)(torch.ones(1, 2))
    >>> y.dtype
    torch.bfloat16
    """

    def __init__(
        self,
        precision: str | int,
        *,
        device_type: str,
        scaler: torch.amp.GradScaler | None = None,
        autocast_cache: bool = True,
    ) -> None:
        self.name = normalize_precision(precision)
        self.device_type = device_type
        # torch.autocast's cache of the lower-precision copies of the weights: Fabric's (and FSDP's) autocast
        # keeps it; the Trainer's MixedPrecision turns it off (Lightning 2.6's plugins/precision/amp.py), which
        # changes the gradients of a weight used several times in a forward (an RNN's, over its time steps).
        self.autocast_cache = self._chosen_autocast_cache = autocast_cache
        assert scaler is None or self.name == "16-mixed", "only 16-mixed scales the loss"
        self.scaler: torch.amp.GradScaler | None = scaler
        if self.name == "16-mixed" and scaler is None:
            # fp16 gradients underflow without loss scaling; bf16 has fp32's range and needs none.
            # This is fp16 on every device, the CPU's too: Runtime(precision="16-mixed") and Lightning's
            # MixedPrecision("16-mixed", "cpu") plugin ask for it; Trainer(precision="16-mixed") on
            # the CPU is "bf16-mixed", as Lightning's (trainer/precision_flag.py).
            self.scaler = torch.amp.GradScaler(device_type)
        self._unscaled: set[int] = set()  # ids of the optimizers unscaled since the scaler's last update
        # Lightning's precision plugin object standing for this setting: the one a Trainer was given
        # (trainer.precision_plugin is it, as Lightning's), else made once when first asked for
        self.plugin: Any = None
        self._true_dtype = {"bf16-true": torch.bfloat16, "16-true": torch.float16, "64-true": torch.float64}.get(
            self.name
        )

    @property
    def param_dtype(self) -> torch.dtype:
        return self._true_dtype or torch.float32

    @property
    def compute_dtype(self) -> torch.dtype:
        return {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(self.name, self.param_dtype)

    @property
    def mixed(self) -> bool:
        """fp32 parameters, computed in a lower precision under autocast."""
        return self.name in _MIXED

    def follow_module_generation(self, lightning1: bool) -> None:
        """A stage's module written for pytorch-lightning 1.x autocasts with torch's cache, as 1.9.5's
        NativeMixedPrecisionPlugin did (its ``torch.autocast`` keeps the default); a 2.x module gets the
        Trainer's choice again (a Trainer may run modules of both generations)."""
        self.autocast_cache = True if lightning1 else self._chosen_autocast_cache

    def autocast(self) -> AbstractContextManager[Any]:
        """A step's context, as Lightning's precision plugins' ``forward_context``: autocast to the compute
        dtype (mixed); under "16-true"/"bf16-true"/"64-true", tensors the step makes (``torch.zeros``,
        ``torch.randn``) in the parameters' dtype, torch's default dtype for the step; else nothing."""
        if self.name in _MIXED:
            return torch.autocast(self.device_type, dtype=self.compute_dtype, cache_enabled=self.autocast_cache)
        if self._true_dtype is not None:
            return default_dtype(self._true_dtype)
        return _NO_AUTOCAST

    def init_context(self) -> AbstractContextManager[Any]:
        """Where ``configure_model`` builds layers: in the parameters' dtype under a "-true" precision
        (Lightning's ``module_init_context``), else as it is."""
        return default_dtype(self._true_dtype) if self._true_dtype is not None else _NO_AUTOCAST

    def convert_module(self, module: nn.Module, *, device: torch.device | None = None) -> nn.Module:
        """``module`` on ``device`` (None: where it is), its floating-point tensors in the
        parameters' dtype under a "-true" precision. Complex buffers (RoPE's ``freqs_cis``),
        integer and bool ones keep their dtype; every strategy places its module through this."""
        return place_tensors(module, device=device, dtype=self._true_dtype)

    @property
    def converts_input(self) -> bool:
        return self._true_dtype is not None

    def convert_input(self, batch: Any) -> Any:
        """Cast floating tensors of a batch to the parameters' dtype under a "-true" precision
        (complex, integer and bool ones keep theirs, as ``convert_module`` keeps a module's)."""
        if self._true_dtype is None:
            return batch
        dtype = self._true_dtype
        return apply_to_tensors(batch, lambda t: t.to(dtype) if t.is_floating_point() else t)

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        return self.scaler.scale(loss) if self.scaler is not None else loss

    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        """Bring gradients back to their true size before clipping (or on_before_optimizer_step)
        reads them; once per step: GradScaler refuses a second unscale_ before its update."""
        if self.scaler is not None and id(optimizer) not in self._unscaled:
            self.scaler.unscale_(optimizer)
            self._unscaled.add(id(optimizer))

    def optimizer_step(
        self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None, **kwargs: Any
    ) -> Any:
        """``optimizer.step(closure, **kwargs)``; with a grad scaler (16-mixed), as Lightning's MixedPrecision:
        the closure first (its backward), then the scaler's step, which cannot take a closure.
        Returns the closure's result where there is one (torch's ``step(closure)`` does too). ``kwargs``:
        what the program gave ``optimizer.step(...)`` besides the closure, passed on as Lightning does."""
        if self.scaler is None:
            # Lightning's gives step a closure always (one that does nothing where there is none)
            return optimizer.step(closure=closure if closure is not None else _do_nothing, **kwargs)  # type: ignore[arg-type]
        closure_result = None
        if closure is not None:
            if isinstance(optimizer, torch.optim.LBFGS):
                # LBFGS calls its closure many times inside one step: a scaler's step cannot. Lightning's
                # MisconfigurationException and words, then why and what to use (a ValueError too, as before)
                raise MisconfiguredValue(
                    "AMP and the LBFGS optimizer are not compatible. (precision='16-mixed' steps through a GradScaler, "
                    "which cannot run LBFGS's closure many times in one step; use 'bf16-mixed' or '32')"
                )
            closure_result = closure()
        result = self.scaler.step(optimizer, **kwargs)  # skipped when the gradients hold inf/NaN
        self.scaler.update()
        self._unscaled.clear()  # update() starts every optimizer's next step scaled
        return closure_result if closure is not None else result

    def state_dict(self) -> dict[str, Any]:
        return {"scaler": self.scaler.state_dict()} if self.scaler is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """Tensors made inside get ``dtype`` (Lightning's ``_DtypeContextManager``)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def _do_nothing() -> None:
    """The closure a step without one gets (Lightning's ``do_nothing_closure``)."""
