"""Lightning 1.x's loops, hooks, hook signatures and Trainer arguments that Lightning 2.0 removed, run as
pytorch-lightning 1.9.5 ran them: several optimizers taking turns (``optimizer_idx``), truncated
backpropagation through time, the optimizer hooks' 1.x signatures, the 1.x hook names (legacy_hooks.py) and
Trainer spellings (legacy_arguments.py). The rest enters this package at three doors only: the runner choice
(``trainer/optimization/runners.py``), the hook dispatcher (``trainer/hooks.py``) and the Trainer's
construction (``trainer/construction.py``, for the arguments); ``tests/test_architecture.py`` checks it."""
