"""Lightning 1.x's hardware arguments of the Trainer that 2.x removed: ``auto_select_gpus=True``
(the GPUs a tensor can be placed on: ``find_usable_cuda_devices``), and ``tpu_cores`` / ``ipus``,
refused here (trainmesh runs on CPU and CUDA). ``gpus`` itself is translated with the other old
spellings (``trainer/legacy_arguments.py``).
"""

from __future__ import annotations

import warnings
from typing import Any

from trainmesh.accelerators import find_usable_cuda_devices
from trainmesh.utilities.refusal import LightningOneName

# The Trainer arguments refused here, with the reason (the inventory of Lightning's API lists them so).
REFUSED_ARGUMENTS = {
    "tpu_cores": "TPUs (torch_xla) are not supported by trainmesh, which runs on CPU and CUDA; "
    "use accelerator='cpu' or 'cuda' with devices=N",
    "ipus": "Graphcore IPUs are not supported by trainmesh, which runs on CPU and CUDA; "
    "use accelerator='cpu' or 'cuda' with devices=N",
}


def hardware_arguments(*, gpus: Any, auto_select_gpus: bool, tpu_cores: Any, ipus: Any) -> Any:
    """``gpus`` after ``auto_select_gpus`` (a count becomes the indices of that many usable GPUs, as
    1.x's ``pick_multiple_gpus``); a TPU or IPU request stops here with the reason."""
    for name, value in (("tpu_cores", tpu_cores), ("ipus", ipus)):
        if value is not None:
            raise ValueError(f"Trainer({name}={value!r}): {REFUSED_ARGUMENTS[name]}")
    if not auto_select_gpus:
        return gpus
    if isinstance(gpus, int) and gpus != 0:
        chosen = find_usable_cuda_devices(gpus)
        warnings.warn(
            f"auto_select_gpus=True is Lightning 1.x's spelling; today: devices=find_usable_cuda_devices({gpus}) "
            f"(here {chosen})",
            LightningOneName,
            stacklevel=4,
        )
        return chosen
    return gpus  # 1.x selected nothing for a list of indices or no GPUs
