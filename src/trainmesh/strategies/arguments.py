"""A strategy rebuilt for the run's placement with every argument it was built with.

A user's ``DDPStrategy(bucket_cap_mb=50)`` is built before the Trainer knows the devices and
precision; ``with_placement`` builds it again for them. The arguments are recorded where the
object is created (``__new__`` sees the constructor call as given), so no constructor can
forget one.

>>> from trainmesh.strategies.ddp import DDPStrategy
>>> DDPStrategy(bucket_cap_mb=50).init_arguments
{'bucket_cap_mb': 50}
"""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")


def new_keeping_arguments(cls: type[T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> T:
    """``cls.__new__``'s body: the new object, with the constructor's arguments as ``init_arguments``
    (the placement apart: ``with_placement`` gives a new one). A class's ``positional_argument`` (Lightning
    Fabric's ``ModelParallelStrategy(parallelize_fn)``) may come first positionally: recorded by its name."""
    name = getattr(cls, "positional_argument", None)
    if args and name is not None and len(args) == 1 and name not in kwargs:
        kwargs = {name: args[0], **kwargs}
        args = ()
    assert not args, f"{cls.__name__} takes keyword arguments only"
    strategy = object.__new__(cls)
    strategy.init_arguments = {name: value for name, value in kwargs.items() if name != "placement"}  # type: ignore[attr-defined]
    return strategy


def rebuilt(strategy: T, placement: Any) -> T:
    """The same strategy class built with ``strategy``'s arguments for ``placement``."""
    return type(strategy)(**strategy.init_arguments, placement=placement)  # type: ignore[attr-defined,call-arg]


def in_place(strategy: Any, placed: Any, placement: Any) -> Any:
    """The program's own ``strategy`` object, placed as ``placed`` is: Lightning's Trainer runs the
    object it was given (``trainer.strategy is s``; the program reads ``s.root_device``,
    ``s.lightning_module`` or calls ``s.barrier()`` through its reference), so the constructor runs
    again on it with the recorded arguments and the placement. ``placed`` was built first, so that a
    placement its constructor refuses raises before the program's object changes. A strategy
    whose ``with_placement`` gives another class (``AutoStrategy``) or that records no arguments
    gives ``placed``."""
    arguments = getattr(strategy, "init_arguments", None)
    if arguments is None or type(placed) is not type(strategy) or placed is strategy:
        return placed
    type(strategy).__init__(strategy, **arguments, placement=placement)
    return strategy
