"""Lightning's words for DDP's "parameters that were not used" error.

Torch's reducer raises "Expected to have finished reduction in the prior iteration ..." at the
step after one whose loss left some parameters out (a branch not taken, a frozen head, a target
network). Lightning's ``DDPStrategy.on_exception`` rewrites that message in the same exception
(same type, same traceback) into its own words naming the option; a program that catches it, or
a log that greps for it, sees Lightning's sentence, so trainmesh says the same.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

# Lightning 2.6's pattern and message (pytorch/strategies/ddp.py, DDPStrategy.on_exception).
_TORCH_PATTERN = ".*Expected to have finished reduction in the prior iteration.*"
UNUSED_PARAMETERS_MESSAGE = (
    "It looks like your LightningModule has parameters that were not used in producing the loss returned"
    " by training_step. If this is intentional, you must enable the detection of unused parameters in DDP,"
    " either by setting the string value `strategy='ddp_find_unused_parameters_true'`"
    " or by setting the flag in the strategy with `strategy=DDPStrategy(find_unused_parameters=True)`."
)


@contextlib.contextmanager
def unused_parameters_in_lightning_words() -> Iterator[None]:
    """Re-raise torch's unused-parameter error with Lightning's message, as Lightning's
    ``_augment_message``: the string arguments that match are replaced, nothing else."""
    try:
        yield
    except RuntimeError as err:
        err.args = tuple(
            UNUSED_PARAMETERS_MESSAGE if isinstance(arg, str) and re.match(_TORCH_PATTERN, arg, re.DOTALL) else arg
            for arg in err.args
        )
        raise
