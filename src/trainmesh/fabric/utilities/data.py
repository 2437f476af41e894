"""``lightning.fabric.utilities.data``: trainmesh's ``trainmesh.utilities.data`` (the same objects, imported on
first use), ``AttributeDict`` and ``suggested_max_num_workers`` from where trainmesh keeps them, and Fabric's
``has_len``, which warns as Fabric's does (trainmesh's loop-side ``has_len`` does not)."""

from trainmesh.utilities.attribute_dict import AttributeDict
from trainmesh.utilities.lazy import alias_of
from trainmesh.utilities.workers import suggested_max_num_workers

__all__ = ["AttributeDict", "has_len", "suggested_max_num_workers"]

__getattr__, __dir__ = alias_of("trainmesh.utilities.data")


def has_len(dataloader: object) -> bool:
    """Whether ``dataloader`` has a ``__len__``; warns, as Fabric, on a length of 0 and on an
    ``IterableDataset`` with one."""
    from trainmesh.utilities.data import has_iterable_dataset, sized_len
    from trainmesh.utilities.rank_zero import rank_zero_warn

    length = sized_len(dataloader)
    if length == 0:
        rank_zero_warn(
            f"`{dataloader.__class__.__name__}` returned 0 length. Please make sure this was your intention."
        )
    if length is not None and has_iterable_dataset(dataloader):
        rank_zero_warn(
            "Your `IterableDataset` has `__len__` defined."
            " In combination with multi-process data loading (when num_workers > 1),"
            " `__len__` could be inaccurate if each worker is not configured independently"
            " to avoid having duplicate data."
        )
    return length is not None
