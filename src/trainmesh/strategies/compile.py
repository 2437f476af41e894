"""torch.compile as one more parallelism-like step a strategy applies to the module, in place.

Compiling in place (``nn.Module.compile``) rather than wrapping (``torch.compile(m)`` returns an
``OptimizedModule``) keeps the user's module the object the loop, the hooks and the checkpoints
see: its state dict keys stay its own (no ``_orig_mod.`` prefix), so a compiled run's checkpoint
loads into an eager one and back. The loop calls ``training_step``, which calls ``self(x)``: that
call runs the compiled forward.
"""

from __future__ import annotations

from typing import Any

from torch import nn


def compile_options(setting: bool | dict[str, Any] | None) -> dict[str, Any] | None:
    """``Trainer(compile=...)`` as torch.compile's keyword arguments; None: do not compile.

    >>> compile_options(True), compile_options(False), compile_options({"backend": "aot_eager"})
    ({}, None, {'backend': 'aot_eager'})
    """
    if setting is None or setting is False:
        return None
    if setting is True:
        return {}
    if isinstance(setting, dict):
        if "model" in setting:
            raise ValueError(
                "compile={'model': ...}: the module to compile is the one you train; pass only "
                "torch.compile's options, e.g. compile={'backend': 'inductor', 'mode': 'max-autotune'}"
            )
        return dict(setting)
    raise TypeError(
        f"compile={setting!r} must be True, False or a dict of torch.compile options "
        "(e.g. {'mode': 'reduce-overhead'}), because it is passed on to torch.compile; got "
        f"a {type(setting).__name__}"
    )


def refuse_compiled_module(module: nn.Module) -> None:
    """A module the user compiled with ``torch.compile(m)``: ask for the module itself."""
    if type(module).__name__ == "OptimizedModule" and isinstance(getattr(module, "_orig_mod", None), nn.Module):
        inner = type(module._orig_mod).__name__
        raise TypeError(
            f"this model is torch.compile({inner}(...)), a wrapper whose state dict keys carry an '_orig_mod.' "
            "prefix and whose training_step would run the uncompiled forward, and a strategy has to compile at "
            "its own point (fsdp: each block before sharding it). Pass the module itself and let the run compile it: "
            f"Trainer(compile=True) or Trainer(compile={{...torch.compile options}}) with trainer.fit({inner}(...)) "
            "(in a loop of your own: Runtime(compile=True))"
        )


def apply_compile(module: nn.Module, *, options: dict[str, Any], units: list[nn.Module] | None = None) -> None:
    """Compile ``module``'s forward in place, or each of ``units`` (sharded strategies: FSDP's hooks
    go around each compiled block, as torchtitan orders it; compiling the whole module would put
    the inner units' hooks into one graph).

    >>> layer = nn.Linear(2, 2)
    >>> apply_compile(layer, options={"backend": "eager"})
    >>> list(layer.state_dict())
    ['weight', 'bias']
    """
    for target in units if units is not None else [module]:
        target.compile(**options)


def innermost(units: list[nn.Module]) -> list[nn.Module]:
    """The shard units that hold no other unit: by default each block (torchtitan compiles each
    transformer block). A compiled region then holds its own unit's FSDP hooks and none of
    another unit's, which is the order ``compile_test.py`` found to train as eager does."""
    return [u for u in units if not any(o is not u and any(m is o for m in u.modules()) for o in units)]


def refuse_compile(options: dict[str, Any] | None, strategy: str, *, instead: str) -> None:
    """A strategy that does not compile yet says so, rather than train eager without a word."""
    if options is not None:
        raise ValueError(
            f"compile is not supported with strategy={strategy!r} yet ({instead}); use compile=False "
            "with it, or compile with strategy='single', 'ddp' or 'fsdp'"
        )
