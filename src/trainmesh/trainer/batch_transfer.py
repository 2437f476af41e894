"""Which object's batch-transfer hooks run: looked up once per run, by Lightning's rule (its
``_DataHookSelector``): for each hook the DataModule's where it overrides it, else the Module's
where it does, else none (the Runtime's own move, the fast path when all three are none)."""

from __future__ import annotations

from typing import Any

from trainmesh.data_hooks import DataHooks
from trainmesh.utilities.device_loader import BatchHooks
from trainmesh.utilities.rank_zero import rank_zero_warn

_NAMES = ("on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer")


def choose_batch_hooks(module: Any, datamodule: Any) -> BatchHooks | None:
    """The run's batch-transfer hooks; None where neither object overrides any of them.

    >>> class Module(DataHooks):
    ...     def on_after_batch_transfer(self, batch, dataloader_idx):
    ...         return batch
    >>> hooks = choose_batch_hooks(Module(), None)
    >>> hooks.before is None and hooks.after is not None
    True
    """
    chosen = [_chosen(name, module, datamodule) for name in _NAMES]
    if not any(chosen):
        return None
    before, transfer, after = chosen
    return BatchHooks(before=before, transfer=transfer, after=after)


def _chosen(name: str, module: Any, datamodule: Any) -> Any:
    in_datamodule = datamodule is not None and _overrides(datamodule, name)
    in_module = _overrides(module, name)
    if not (in_datamodule or in_module) and callable(getattr(module, "__dict__", {}).get(name)):
        # set on the module itself (a wrapper around the default): Lightning calls the module's hook
        # whenever the data module does not override it, so the instance's runs
        return getattr(module, name)
    if in_datamodule and in_module:
        rank_zero_warn(
            f"{type(module).__name__} and {type(datamodule).__name__} both define {name}: the data module's "
            "runs (Lightning's rule); remove one of them"
        )
    if in_datamodule:
        return getattr(datamodule, name)
    return getattr(module, name) if in_module else None


def _overrides(owner: Any, name: str) -> bool:
    """Whether ``owner`` has its own ``name``: overridden on a DataHooks class, defined on any other."""
    found = getattr(type(owner), name, None)
    if isinstance(owner, DataHooks):
        return found is not getattr(DataHooks, name)
    return callable(found)
