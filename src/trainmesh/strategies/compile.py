"""torch.compile as one more parallelism-like step a strategy applies to the module, in place.

Compiling in place (``nn.Module.compile``) rather than wrapping (``torch.compile(m)`` returns an
``OptimizedModule``) keeps the user's module the object the loop, the hooks and the checkpoints
see: its state dict keys stay its own (no ``_orig_mod.`` prefix), so a compiled run's checkpoint
loads into an eager one and back. The loop calls ``training_step``, which calls ``self(x)``: that
call runs the compiled forward.

A module the user wrapped (``trainer.fit(torch.compile(m))``, as Lightning accepts it) is unwrapped
to ``m`` and compiled the same way, in place, with the settings of the user's own call.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torch import nn

if TYPE_CHECKING:
    from trainmesh.strategies.protocol import Placement, Strategy


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


@dataclasses.dataclass(frozen=True)
class CompiledByUser:
    """The settings of ``torch.compile(m, **kwargs)``, as torch keeps them: the compile context
    (``OptimizedModule.dynamo_ctx``) that ``torch.compile`` built from ``kwargs`` (backend, mode,
    options, fullgraph, dynamic). Applied to a function it is ``torch.compile(fn, **kwargs)``, so
    the kwargs themselves need not be known (no patching of ``torch.compile`` at import, and the
    order of imports does not matter)."""

    context: Callable[[Callable[..., Any]], Callable[..., Any]]


CompileSetting = dict[str, Any] | CompiledByUser


class _CompiledByUser:
    """The settings each unwrapped module was compiled with, kept here rather than on the module
    (Lightning writes ``_compiler_ctx`` onto the LightningModule; nothing is written onto a user's
    module here): by the module's identity, an entry living as long as its module (a weak reference,
    so the record keeps nothing alive, and a later module reusing the ``id`` is not taken for it)."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[weakref.ref[nn.Module], CompiledByUser]] = {}

    def record(self, module: nn.Module, setting: CompiledByUser) -> None:
        key = id(module)

        def forget(_: weakref.ref[nn.Module]) -> None:  # the module is gone: its id may be reused
            self._by_id.pop(key, None)

        self._by_id[key] = (weakref.ref(module, forget), setting)

    def of(self, module: nn.Module) -> CompiledByUser | None:
        found = self._by_id.get(id(module))
        return found[1] if found is not None and found[0]() is module else None

    def drop(self, module: nn.Module) -> None:
        if self.of(module) is not None:
            del self._by_id[id(module)]


# Where a module the user compiled has its compile settings once unwrapped: the strategy that
# places it compiles it with them.
_COMPILED_BY_USER = _CompiledByUser()


def compiled_by_user(module: nn.Module) -> CompiledByUser | None:
    """The settings of the user's own ``torch.compile(module)``, once ``uncompiled`` unwrapped it
    (None: the user did not compile it).

    Args:
        module: the module ``uncompiled`` handed back.

    Examples:
        >>> compiled_by_user(nn.Linear(1, 1)) is None
        True
    """
    return _COMPILED_BY_USER.of(module)


def _compiled_by_torch(module: Any) -> bool:
    # By name, not isinstance: importing torch._dynamo costs seconds, and a program that never
    # compiled never imported it.
    return type(module).__name__ == "OptimizedModule" and isinstance(getattr(module, "_orig_mod", None), nn.Module)


def uncompiled(module: Any, strategy: Strategy, placement: Placement) -> Any:
    """A module the user compiled (``torch.compile(m, ...)``): ``m`` itself, with the settings it
    was compiled with recorded (``compiled_by_user``), which the strategy applies in place where its order says (as
    ``Trainer(compile=...)`` would), so state dict keys carry no ``_orig_mod.`` and the user's
    compiled reference wraps the very module that trains. Any other module: as it is.
    Refused, before anything starts, under a strategy whose capabilities do not say it compiles."""
    if _compiled_by_torch(module):
        inner: nn.Module = module._orig_mod
        name = type(inner).__name__
        context = getattr(module, "dynamo_ctx", None)
        if not callable(context):
            raise TypeError(
                f"this model is torch.compile({name}(...)), but this torch does not say with which settings "
                f"(no dynamo_ctx on the OptimizedModule); pass {name}(...) itself and compile it with "
                "Trainer(compile={...torch.compile options}) (in a loop of your own: Runtime(compile=...))"
            )
        if placement.compile is not None:
            raise ValueError(
                f"this model is torch.compile({name}(...)) and the run compiles too (Trainer(compile=...) or "
                f"Runtime(compile=...) gave {placement.compile!r}): compile once, with one or the other"
            )
        _COMPILED_BY_USER.record(inner, CompiledByUser(context))
        module = inner
    check_compiled(module, strategy, placement)
    return module


def check_compiled(module: nn.Module, strategy: Strategy, placement: Placement) -> None:
    """A module the user compiled, under a strategy that has no compiled run checked against
    eager: stop with that strategy's own reason (what ``Trainer(compile=True)`` says with it)."""
    if compiled_by_user(module) is None or strategy.capabilities.compile:
        return
    try:
        strategy.with_placement(dataclasses.replace(placement, compile={}))
        reason = "its capabilities do not say that it compiles"
    except CompileRefused as refusal:  # the strategy's own reason, given where its constructor refuses compile
        reason = refusal.reason
    name = type(module).__name__
    raise CompileRefused(
        f"this model is torch.compile({name}(...)), and strategy={strategy.name!r} does not compile yet ({reason}): "
        f"pass {name}(...) itself, uncompiled, to train it eager with strategy={strategy.name!r}, or keep "
        "torch.compile and train with strategy='single', 'ddp' or 'fsdp'",
        reason=reason,
    )


def compile_setting(options: dict[str, Any] | None, module: nn.Module) -> CompileSetting | None:
    """What the strategy compiles ``module`` with: the run's ``compile=`` options, else the
    settings of the user's own ``torch.compile`` (None: eager)."""
    if options is not None:
        return options
    return compiled_by_user(module)


def apply_compile(module: nn.Module, *, options: CompileSetting, units: list[nn.Module] | None = None) -> None:
    """Compile ``module``'s forward in place, or each of ``units`` (sharded strategies: FSDP's hooks
    go around each compiled block, as torchtitan orders it; compiling the whole module would put
    the inner units' hooks into one graph).

    >>> layer = nn.Linear(2, 2)
    >>> apply_compile(layer, options={"backend": "eager"})
    >>> list(layer.state_dict())
    ['weight', 'bias']
    """
    for target in units if units is not None else [module]:
        if isinstance(options, CompiledByUser):
            # What nn.Module.compile does (_compiled_call_impl = torch.compile(_call_impl, **kwargs)),
            # with the context torch.compile built from the user's kwargs.
            target._compiled_call_impl = options.context(target._call_impl)
        else:
            target.compile(**options)


def innermost(units: list[nn.Module]) -> list[nn.Module]:
    """The shard units that hold no other unit: by default each block (torchtitan compiles each
    transformer block). A compiled region then holds its own unit's FSDP hooks and none of
    another unit's, which is the order ``compile_test.py`` found to train as eager does."""
    return [u for u in units if not any(o is not u and any(m is o for m in u.modules()) for o in units)]


class CompileRefused(ValueError):
    """A strategy does not compile; ``reason`` says why, in its own words."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def refuse_compile(options: dict[str, Any] | None, strategy: str, *, instead: str) -> None:
    """A strategy that does not compile yet says so, rather than train eager without a word."""
    if options is not None:
        raise CompileRefused(
            f"compile is not supported with strategy={strategy!r} yet ({instead}); use compile=False "
            "with it, or compile with strategy='single', 'ddp' or 'fsdp'",
            reason=instead,
        )


def from_compiled_module(compiled: Any, base: type) -> Any:
    """The module inside ``torch.compile(module, ...)``, recorded as compiled with those settings so
    that the strategy placing it compiles it in place (Lightning's ``from_compiled``, without writing
    onto the module). ``compiled`` must wrap a ``base`` (the trainmesh Module)."""
    if not _compiled_by_torch(compiled):
        raise ValueError(f"`model` is required to be a `OptimizedModule`. Found a `{type(compiled).__name__}` instead.")
    inner = compiled._orig_mod
    if not (isinstance(inner, base) and isinstance(inner, nn.Module)):
        raise ValueError(
            f"`model` is expected to be a compiled LightningModule. Found a `{type(inner).__name__}` instead"
        )
    _COMPILED_BY_USER.record(inner, CompiledByUser(compiled.dynamo_ctx))
    return inner


def to_uncompiled_module(model: Any, base: type) -> Any:
    """The module without compilation: inside ``torch.compile(module)``, or one ``from_compiled_module``
    returned, whose record is dropped (Lightning's ``to_uncompiled``)."""
    if _compiled_by_torch(model):
        inner = model._orig_mod
        if not isinstance(inner, base):
            raise TypeError(
                f"Unexpected error, the wrapped model should be a LightningModule, found {type(model).__name__}"
            )
        return inner
    if isinstance(model, base) and isinstance(model, nn.Module):
        if _COMPILED_BY_USER.of(model) is None:
            raise ValueError(
                "`model` is required to be a compiled LightningModule. Found a non-compiled LightningModule instead."
            )
        _COMPILED_BY_USER.drop(model)
        return model
    raise ValueError("`model` must either be an instance of OptimizedModule or LightningModule")
