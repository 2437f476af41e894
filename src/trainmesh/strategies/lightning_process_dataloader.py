"""A program's strategy subclass overriding Lightning's ``process_dataloader(dataloader)``.

Lightning's Trainer hands every loader it sets up to ``trainer.strategy.process_dataloader(dataloader)``
after its sampler injection (``data_connector._process_dataloader``: the train loader, each validation,
test and predict loader, once a setup). trainmesh's strategies have a method of that name with more
arguments (``train``, ``seed``, ...: the sharding), so a subclass written for Lightning replaces it with
a one-argument method: trainmesh's own is run first (the sharding), then the program's, as Lightning's.
A predict loader reaches it as Lightning's does: rebuilt around the index-recording batch sampler
(``batch_size`` None; an override rebuilding a loader from ``dataloader.batch_size`` predicts sample by
sample there, as under Lightning).
"""

from __future__ import annotations

import inspect
from typing import Any

from trainmesh.utilities.index_batches import indexed


def process_dataloader(strategy: Any, loader: Any, *, distribute: bool, **options: Any) -> Any:
    """``loader`` sharded by the strategy (``options``: its ``train``, ``seed``, ...; not where
    ``distribute`` is False, Lightning's ``use_distributed_sampler=False``), then given to a program's
    Lightning-style override, where its class has one."""
    owner = type(strategy)
    if not _lightning_style(owner.process_dataloader):
        return strategy.process_dataloader(loader, **options) if distribute else loader
    own = next(
        cls.__dict__["process_dataloader"]
        for cls in owner.__mro__
        if "process_dataloader" in cls.__dict__ and not _lightning_style(cls.__dict__["process_dataloader"])
    )
    processed = own(strategy, loader, **options) if distribute else loader
    if options.get("predict"):  # Lightning's predict loader reaches it rebuilt around its index sampler
        processed = indexed(processed)
    return strategy.process_dataloader(processed)


def _lightning_style(method: Any) -> bool:
    """Whether ``method`` is Lightning's ``process_dataloader(self, dataloader)`` (no ``train`` argument)."""
    try:
        return "train" not in inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False
