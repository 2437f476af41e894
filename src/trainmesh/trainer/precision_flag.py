"""``Trainer(precision=..., plugins=[a precision plugin])`` resolved as Lightning 2.6's accelerator
connector resolves them (its ``_convert_precision_to_unified_args`` and ``_check_and_init_precision``):

- a value Lightning does not take stops with its error; the historical spellings ``16``/``"16"``/
  ``"bf16"`` warn as its do and become ``"16-mixed"``/``"bf16-mixed"`` (``32``/``64`` silently);
- ``"16-mixed"`` on the CPU trains ``"bf16-mixed"``, with Lightning's warning (and pytorch-lightning
  1.9.5's ``precision=16`` did the same): fp16 autocast is what neither Lightning runs there by this
  setting. A program that wants float16 with a GradScaler on the CPU asks for it as Lightning allows:
  ``plugins=[MixedPrecision("16-mixed", "cpu")]`` (a plugin runs as given, its ``scaler`` too);
- the ``ModelParallelStrategy`` takes the precisions Lightning's takes.

>>> choose_precision("bf16-mixed", None, device_type="cpu", strategy="auto").name
'bf16-mixed'
"""

from __future__ import annotations

import sys
from typing import Any

from trainmesh.precision import PRECISIONS, Precision
from trainmesh.utilities.rank_zero import rank_zero_info, rank_zero_warn
from trainmesh.utilities.suggestions import did_you_mean

# What Lightning 2.6's Trainer takes, in the order its error lists them (lightning.fabric's
# _PRECISION_INPUT_STR, _INT and _STR_ALIAS); the transformer-engine ones are refused below.
LIGHTNING_PRECISIONS: tuple[str | int, ...] = (
    "transformer-engine", "transformer-engine-float16", "16-true", "16-mixed", "bf16-true", "bf16-mixed",
    "32-true", "64-true", 64, 32, 16, "64", "32", "16", "bf16",
)  # fmt: skip

_HISTORICAL = {"64": "64-true", "32": "32-true", "16": "16-mixed", "bf16": "bf16-mixed"}
_MODEL_PARALLEL = ("32-true", "bf16-mixed", "bf16-true", "16-true")  # Lightning's mp_precision_supported


def unified_precision(precision: Any) -> str:
    """Lightning's spelling of ``precision`` (``16`` is ``"16-mixed"``, None the default ``"32-true"``),
    checked and warned about as its is."""
    if precision is None:
        return "32-true"
    if precision not in LIGHTNING_PRECISIONS:  # Lightning's text, then the nearest name
        raise ValueError(
            f"Precision {precision!r} is invalid. Allowed precision values: {LIGHTNING_PRECISIONS}"
            + did_you_mean(precision, [*PRECISIONS, "bf16"])
        )
    name = str(precision)
    if name in _HISTORICAL:
        if name[:2] not in ("32", "64"):
            rank_zero_warn(
                f"`precision={name}` is supported for historical reasons but its usage is discouraged. "
                f"Please set your precision to {_HISTORICAL[name]} instead!",
                stacklevel=8,  # the user's Trainer(...) line
            )
        name = _HISTORICAL[name]
    return name


def choose_precision(flag: str, plugin: Any, *, device_type: str, strategy: Any) -> Precision:
    """The run's precision: the ``plugin``'s where one was given (as given, its scaler included), else
    the ``flag`` (already unified) on ``device_type``, as Lightning's connector chooses it."""
    if plugin is not None:
        scaler = getattr(plugin, "scaler", None) if plugin.precision == "16-mixed" else None
        chosen = Precision(
            plugin.precision, device_type=device_type, scaler=scaler, autocast_cache=_autocast_cache(strategy)
        )
        chosen.plugin = plugin  # trainer.precision_plugin is the object given, as Lightning's
        return chosen
    if flag.startswith("transformer-engine"):
        raise ValueError(
            f"Trainer(precision={flag!r}): NVIDIA Transformer Engine's FP8 training is not supported by trainmesh "
            "(Lightning runs it through the transformer_engine package, on NVIDIA GPUs only); use precision="
            "'bf16-mixed' (or '16-mixed' on a GPU)"
        )
    if _is_model_parallel(strategy) and flag not in _MODEL_PARALLEL:
        raise ValueError(
            f"The `ModelParallelStrategy` does not support `Fabric(..., precision={flag!r})`."
            f" Choose a different precision among: {', '.join(_MODEL_PARALLEL)}."
        )
    if flag == "16-mixed" and device_type == "cpu":
        rank_zero_warn(
            "You passed `Trainer(accelerator='cpu', precision='16-mixed')` but AMP with fp16 is not supported on "
            "CPU. Using `precision='bf16-mixed'` instead.",
            # from the library's own line, as Lightning's (its connector's): shown as Lightning shows it,
            # "<file>:<line>: You passed ..." without a category or the program's source line
        )
        flag = "bf16-mixed"
    if flag in ("16-mixed", "bf16-mixed"):
        rank_zero_info(f"Using {'16bit' if flag == '16-mixed' else 'bfloat16'} Automatic Mixed Precision (AMP)")
    return Precision(flag, device_type=device_type, autocast_cache=_autocast_cache(strategy))


def _autocast_cache(strategy: Any) -> bool:
    """Lightning's Trainer autocasts with ``cache_enabled=False`` (its MixedPrecision plugin), except under
    FSDP, whose FSDPPrecision keeps torch's default."""
    return "fsdp" in (strategy if isinstance(strategy, str) else type(strategy).__name__).lower()


def _is_model_parallel(strategy: Any) -> bool:
    module = sys.modules.get("trainmesh.strategies.model_parallel")  # not imported: no such strategy was made
    return module is not None and isinstance(strategy, module.ModelParallelStrategy)
