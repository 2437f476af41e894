"""pytorch-lightning 1.9.5's callback names that 2.0 removed: ``ProgressBarBase`` (2.0 renamed it
``ProgressBar``: the base a custom bar subclasses, which draws nothing) and ``QuantizationAwareTraining``
(2.0 removed it; refused with the reason).

>>> ProgressBarBase is ProgressBar
True
"""

from __future__ import annotations

from trainmesh.callbacks.progress import ProgressBar
from trainmesh.utilities.refusal import refused_class

__all__ = ["ProgressBarBase", "QuantizationAwareTraining"]

ProgressBarBase = ProgressBar

QuantizationAwareTraining = refused_class(
    "QuantizationAwareTraining",
    "Lightning 2.0 removed this callback and trainmesh does not have it (1.9.5's is 347 lines over "
    "torch.ao.quantization's eager mode, which torch deprecates); quantize with torch.ao.quantization "
    "yourself: prepare_qat(model) before fit (in configure_model) and convert(model.eval()) after it",
    module=__name__,
)
