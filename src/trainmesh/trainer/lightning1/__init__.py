"""Lightning 1.x's loops and hook signatures that Lightning 2.0 removed, run as pytorch-lightning 1.9.5
ran them: several optimizers taking turns (``optimizer_idx``), truncated backpropagation through time,
and the optimizer hooks' 1.x signatures. The core enters this package at two doors only: the runner
choice (``trainer/optimization/runners.py``) and the hook dispatcher (``trainer/hooks.py``);
``tests/test_architecture.py`` checks it."""
