"""``Trainer(plugins=...)`` sorted as Lightning's accelerator connector sorts it: a precision plugin
sets the precision, ``AsyncCheckpointIO`` writes checkpoints in the background, ``TorchCheckpointIO``
is trainmesh's own writer, a cluster environment must be the one the process is in, a layer sync
(``TorchSyncBatchNorm``) converts batch norms for fit; Lightning 1.x's strategies in ``plugins``
(``DDPPlugin(...)``, ``"ddp_sharded"``) become the strategy, with a deprecation warning.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainmesh.utilities.exceptions import MisconfiguredType
from trainmesh.utilities.refusal import LightningOneName

if TYPE_CHECKING:
    from trainmesh.plugins import AsyncCheckpointIO, LayerSync


@dataclass(frozen=True)
class SortedPlugins:
    precision: str | int
    strategy: Any
    precision_plugin: Any  # a precision plugin given (trainer/precision_flag.py runs it as given), or None
    background_writer: AsyncCheckpointIO | None
    layer_sync: LayerSync | None
    checkpoint_io: Any = None  # a TorchCheckpointIO given: the strategy's checkpoint_io (Lightning's object)


def listed(plugins: Any) -> list[Any]:
    """``Trainer(plugins=...)`` as a list (one plugin, None or an iterable of them)."""
    if plugins is None:
        return []
    return [plugins] if not isinstance(plugins, Iterable) or isinstance(plugins, str) else list(plugins)


def is_strategy(plugin: Any) -> bool:
    """Whether ``plugin`` is a strategy (a name, or an object: ``DDPPlugin(...)``), which only Lightning 1.x
    took in ``plugins`` (up to 1.7; 1.8 and 2.x raise)."""
    return isinstance(plugin, str) or callable(getattr(plugin, "with_placement", None))


def sort_plugins(
    plugins: Any, *, precision: str | int, strategy: Any, sync_batchnorm: bool, precision_given: bool = True
) -> SortedPlugins:
    """The settings ``plugins`` stand for, checked (Lightning's messages where it has one).
    ``precision_given``: the program passed ``precision`` (any value beside a precision plugin raises)."""
    given = listed(plugins)
    if not given and not sync_batchnorm:
        return SortedPlugins(precision, strategy, None, None, None)  # without plugins the package is not imported
    from trainmesh.plugins import (
        AsyncCheckpointIO,
        ClusterEnvironment,
        LayerSync,
        Precision,
        TorchCheckpointIO,
        TorchSyncBatchNorm,
    )

    kinds: Counter[str] = Counter()
    writer, precision_plugin, checkpoint_io = None, None, None
    layer_sync: LayerSync | None = TorchSyncBatchNorm() if sync_batchnorm else None
    for plugin in given:
        if is_strategy(plugin):
            strategy = _strategy_from_plugin(plugin, strategy)
        elif isinstance(plugin, Precision):
            _refuse_own_precision_methods(plugin)
            precision_plugin, kinds["Precision"] = plugin, kinds["Precision"] + 1
        elif isinstance(plugin, AsyncCheckpointIO):
            writer, kinds["CheckpointIO"] = plugin, kinds["CheckpointIO"] + 1
        elif type(plugin) is TorchCheckpointIO:  # trainmesh's own writer, under Lightning's name
            checkpoint_io, kinds["CheckpointIO"] = plugin, kinds["CheckpointIO"] + 1
        elif isinstance(plugin, ClusterEnvironment):
            kinds["ClusterEnvironment"] += 1
            if (refusal := plugin.trainer_refusal()) is not None:
                raise ValueError(refusal)
        elif isinstance(plugin, LayerSync):
            if sync_batchnorm and not isinstance(plugin, TorchSyncBatchNorm):
                raise ValueError(
                    f"You set `Trainer(sync_batchnorm=True)` and provided a `{type(plugin).__name__}`"
                    " plugin, but this is not allowed. Choose one or the other."
                )
            layer_sync, kinds["TorchSyncBatchNorm"] = plugin, kinds["TorchSyncBatchNorm"] + 1
        else:
            raise MisconfiguredType(_other_plugin(plugin))  # Lightning's class (a TypeError too, as before)
    duplicated = [kind for kind, count in kinds.items() if count > 1]
    if duplicated:
        raise ValueError(
            f"Received multiple values for {', '.join(duplicated)} flags in `plugins`. Expected one value for each type at most."
        )
    if precision_plugin is not None:
        if precision_given:  # Lightning 2.6's check (pytorch-lightning 1.9.5 took the plugin beside precision=32)
            raise ValueError(f"Received both `precision={precision}` and `plugins={precision_plugin}`. Choose one.")
        precision = precision_plugin.precision
    return SortedPlugins(precision, strategy, precision_plugin, writer, layer_sync, checkpoint_io)


def _refuse_own_precision_methods(plugin: Any) -> None:
    """A precision plugin of the program's own class (Lightning's precision_expert page: ``class
    CustomPrecision(Precision)``) is taken for its ``precision``; methods it defines (``convert_input``,
    ``pre_backward``, ``optimizer_step``, ...) would never be called, as trainmesh runs the precision in its
    own loop: refused before anything runs, rather than trained without them."""
    own = sorted(
        name
        for cls in type(plugin).__mro__
        if not cls.__module__.startswith("trainmesh.") and cls is not object
        for name, value in vars(cls).items()
        if not name.startswith("__") and (callable(value) or isinstance(value, property | staticmethod | classmethod))
    )
    if own:
        raise ValueError(
            f"plugins=[{type(plugin).__name__}(...)]: a precision plugin of your own class is taken for its precision "
            f"({plugin.precision!r}) only; the methods it defines ({', '.join(own)}) would not be called, as trainmesh "
            "runs the precision in its own loop. Pass Trainer(precision=...) and move that logic into the "
            "LightningModule's hooks (on_before_batch_transfer / on_after_batch_transfer for the inputs, "
            "on_before_backward / on_after_backward, optimizer_step, configure_gradient_clipping)"
        )


def _strategy_from_plugin(plugin: Any, strategy: Any) -> Any:
    """Lightning 1.x's strategy in ``plugins`` (an object, or a name such as "ddp_sharded") as the strategy."""
    from trainmesh.plugins.lightning1 import STRATEGY_STRINGS

    if isinstance(plugin, str):
        if plugin not in STRATEGY_STRINGS:
            raise ValueError(
                f"plugins={plugin!r}: Lightning 1.x's strategy names taken in plugins are "
                f"{', '.join(STRATEGY_STRINGS)}; trainmesh has no DeepSpeed, Horovod, TPU or IPU strategy "
                "(use strategy='fsdp' or 'zero1' for sharded training)"
            )
        warnings.warn(
            f"plugins={plugin!r} is Lightning 1.x's spelling; today: strategy={STRATEGY_STRINGS[plugin]!r}",
            LightningOneName,
            stacklevel=5,  # the user's Trainer(...) line
        )
        plugin = STRATEGY_STRINGS[plugin]
    else:  # a strategy object (what 1.x's DDPPlugin(...) makes) in plugins
        warnings.warn(
            f"a strategy in plugins is Lightning 1.x's spelling; today: Trainer(strategy={type(plugin).__name__}(...))",
            LightningOneName,
            stacklevel=5,  # the user's Trainer(...) line
        )
    if strategy not in ("auto", None):
        raise ValueError(f"Trainer(strategy={strategy!r}, plugins=[{plugin!r}]): two strategies; pass one as strategy=")
    return plugin


def _other_plugin(plugin: Any) -> str:
    if type(plugin).__name__ == "AsyncCheckpointIO":
        return (
            f"plugins=[{type(plugin).__module__}.AsyncCheckpointIO()] is another library's; use "
            "trainmesh's: from trainmesh.plugins import AsyncCheckpointIO"
        )
    return (
        f"Found invalid type for plugin {plugin!r}. Expected one of: Precision, CheckpointIO, ClusterEnvironment, or "
        "LayerSync (from trainmesh.plugins). A CheckpointIO of a program's own is not taken: trainmesh writes "
        "checkpoints atomically itself (TorchCheckpointIO's format), in the background with AsyncCheckpointIO"
    )
