"""Lightning hook names that trainmesh never calls, refused before a run starts.

A Lightning program brought to trainmesh may override a hook that trainmesh has no call for; the
run would then train with that code never run, and say nothing: the worst kind of wrong run. So a
module or callback that defines one of these names stops fit/validate/test/predict at its start
with the hook, the class, and what to use instead.

The lists hold only names trainmesh does not call: hooks Lightning calls that trainmesh does not
(yet), and names no Lightning release defines, which have no meaning to honour (each entry says
which); tests/trainer/test_unsupported_hooks.py checks that no name here is ever called and that
every one of them is refused. A hook trainmesh starts calling leaves these lists; Lightning 1.x's
names that trainmesh calls are in lightning1/legacy_hooks.py.
"""

from __future__ import annotations

from typing import Any

from trainmesh.callbacks.base import defines_hook

# LightningModule hooks: name -> what to use instead.
MODULE_HOOKS: dict[str, str] = {
    # No Lightning release defines it (2.6.6 included): a callback hook proposed in Lightning's PR #21272
    "on_before_optimizer_setup": "no Lightning version defines this hook, so it has no meaning to honour; freeze or "
    "change parameters at the end of configure_model, or in configure_optimizers before building the optimizer",
}


# Callback hooks: name -> what to use instead.
CALLBACK_HOOKS: dict[str, str] = {
    # No Lightning release defines it (2.6.6 included): proposed in Lightning's PR #21272, not merged
    "on_before_optimizer_setup": "no Lightning version defines this hook, so it has no meaning to honour; use "
    "setup(trainer, module, stage): it runs before configure_optimizers",
}


def refuse_uncalled_hooks(module: Any, callbacks: list[Any]) -> None:
    """Stop with an error naming the first Lightning hook that ``module`` or a callback defines
    and trainmesh never calls. Read from the classes once per run, before anything runs."""
    owners: list[tuple[Any, dict[str, str], str]] = [(module, MODULE_HOOKS, "module")]
    owners += [(callback, CALLBACK_HOOKS, "callback") for callback in callbacks]
    _refuse(owners)


def _refuse(owners: list[tuple[Any, dict[str, str], str]]) -> None:
    for owner, names, kind in owners:
        for name, instead in names.items():
            # A callback from another library is judged by what it defines, not by its base class's empty hooks.
            defined = defines_hook(owner, name) if kind == "callback" else callable(getattr(type(owner), name, None))
            if defined:
                raise ValueError(
                    f"{type(owner).__name__}.{name}: {name} is a Lightning {kind} hook that trainmesh never calls, "
                    f"so this code would not run and the run would be silently different. Instead: {instead}. "
                    f"Remove or rename the method"
                )
