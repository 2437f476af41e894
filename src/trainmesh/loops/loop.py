"""pytorch-lightning 1.x's ``Loop`` (``pytorch_lightning.loops.loop``), which Lightning 2.0 removed: the base
class of a loop of one's own, run by calling its ``run()``, as 1.9.5 defines it.

What trainmesh does not have is the other half of 1.x's loop API: its Trainer's loops as objects a program
subclasses, replaces or rewires (``trainer.fit_loop = KFoldLoop(...)``, ``fit_loop.replace(...)``,
1.x's ``FitLoop``, ``TrainingEpochLoop``, ``ManualOptimization``, ...; an ``OptimizerLoop`` subclass
connected with ``epoch_loop.batch_loop.connect(optimizer_loop=...)`` is the exception:
loops/optimization/optimizer_loop.py): trainmesh's loop is functions over a typed state, and ``trainer.fit_loop`` is a
read-only view of it. Each of those names stops with :data:`TRAINER_LOOPS_REFUSAL`.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from trainmesh.utilities.exceptions import MisconfigurationException
from trainmesh.utilities.refusal import refused_class

if TYPE_CHECKING:
    from trainmesh.trainer_view import TrainerView

__all__ = ["TRAINER_LOOPS_REFUSAL", "Loop", "trainer_loop_class"]

T = TypeVar("T")  # what ``run`` returns

TRAINER_LOOPS_REFUSAL = (
    "pytorch-lightning 1.x's Trainer loops as objects a program subclasses, replaces or runs (FitLoop, "
    "TrainingEpochLoop, TrainingBatchLoop, ManualOptimization, EvaluationLoop, PredictionLoop, DataLoaderLoop, "
    "trainer.fit_loop = ..., .replace(...), .run()) were removed in Lightning 2.0 and are not in trainmesh, whose "
    "loop is not made of such objects (trainer.fit_loop, .validate_loop and .test_loop are read-only views of its "
    "counters). trainmesh has 1.x's Loop base class for a loop of your own that you run with loop.run() "
    "(trainmesh.loops.Loop), and an OptimizerLoop subclass connected with "
    "trainer.fit_loop.epoch_loop.batch_loop.connect(optimizer_loop=...) on one device. Instead: a loop over folds "
    "or stages calls trainer.fit / trainer.test once per fold, with a new Trainer and the fold's DataModule "
    "(Lightning 2.x's way); what a custom loop changes in a step is manual optimization "
    "(self.automatic_optimization = False; opt = self.optimizers(); self.manual_backward(loss); opt.step())"
)


class Loop(ABC, Generic[T]):
    """1.x's loop interface: ``run()`` calls ``reset()``, ``on_run_start``, then ``on_advance_start``,
    ``advance``, ``on_advance_end`` until ``done`` (a ``StopIteration`` from them ends it too), then returns
    ``on_run_end()``; ``skip`` returns ``on_skip()`` at once. Subclasses define ``done``, ``reset`` and
    ``advance``.

    Examples:
        >>> class Count(Loop):
        ...     def __init__(self, n):
        ...         super().__init__()
        ...         self.n, self.i = n, 0
        ...     @property
        ...     def done(self):
        ...         return self.i >= self.n
        ...     def reset(self):
        ...         self.i = 0
        ...     def advance(self):
        ...         self.i += 1
        ...     def on_run_end(self):
        ...         return self.i
        >>> Count(3).run()
        3
    """

    def __init__(self) -> None:
        self._restarting = False
        self._trainer: TrainerView | None = None

    @property
    def trainer(self) -> TrainerView:
        """The Trainer this loop and its sub-loops were given (``loop.trainer = trainer``)."""
        if self._trainer is None:
            raise RuntimeError("The loop is not attached to a Trainer.")
        return self._trainer

    @trainer.setter
    def trainer(self, trainer: TrainerView) -> None:
        self._trainer = trainer
        for value in self.__dict__.values():
            if isinstance(value, Loop):
                value.trainer = trainer

    @property
    def restarting(self) -> bool:
        """Whether this loop's state was reloaded (``load_state_dict``) and it is restarting."""
        return self._restarting

    @restarting.setter
    def restarting(self, restarting: bool) -> None:
        self._restarting = restarting
        for value in vars(self).values():
            if isinstance(value, Loop):
                value.restarting = restarting

    @property
    @abstractmethod
    def done(self) -> bool:
        """When the loop is finished."""

    @property
    def skip(self) -> bool:
        """Whether ``run`` returns ``on_skip()`` at once (default ``False``)."""
        return False

    def connect(self, **kwargs: Loop) -> None:
        """Connect sub-loops to this one (the loops form a tree); a subclass stores them."""

    def replace(self, **loops: Loop | type[Loop]) -> None:
        """Replace sub-loops by name: a class is made with the old loop's ``__init__`` arguments (their
        signatures must match), the old loop's sub-loops are connected to the new one, which gets this
        loop's Trainer and is connected here."""
        new_loops = {}
        for name, type_or_object in loops.items():
            old_loop = getattr(self, name)
            if isinstance(type_or_object, type):
                old_parameters = inspect.signature(old_loop.__class__.__init__).parameters
                if old_parameters != inspect.signature(type_or_object.__init__).parameters:
                    raise MisconfigurationException(
                        f"`{type(self).__name__}.replace({type_or_object.__name__})` can only be used if the "
                        f"`__init__` signatures match but `{type(old_loop).__name__}` does not."
                    )
                loop = type_or_object(**{p: getattr(old_loop, p) for p in old_parameters if p != "self"})
            else:
                loop = type_or_object
            loop.connect(**{n: child for n, child in old_loop.__dict__.items() if isinstance(child, Loop)})
            loop.trainer = self.trainer
            new_loops[name] = loop
        self.connect(**new_loops)

    def on_skip(self) -> T:  # type: ignore[empty-body]
        """What ``run`` returns when ``skip``."""

    def run(self, *args: Any, **kwargs: Any) -> T:
        """Run the loop (see the class) and return ``on_run_end()``; the arguments go to each hook."""
        if self.skip:
            return self.on_skip()
        self.reset()
        self.on_run_start(*args, **kwargs)
        while not self.done:
            try:
                self.on_advance_start(*args, **kwargs)
                self.advance(*args, **kwargs)
                self.on_advance_end()
                self._restarting = False
            except StopIteration:
                break
        self._restarting = False
        return self.on_run_end()

    @abstractmethod
    def reset(self) -> None:
        """Reset the loop's state at the start of each ``run``."""

    def on_run_start(self, *args: Any, **kwargs: Any) -> None:
        """First thing in ``run`` after ``reset``."""

    def on_advance_start(self, *args: Any, **kwargs: Any) -> None:
        """Before each ``advance``."""

    @abstractmethod
    def advance(self, *args: Any, **kwargs: Any) -> None:
        """One step of the loop."""

    def on_advance_end(self) -> None:
        """After each ``advance``."""

    def on_run_end(self) -> T:  # type: ignore[empty-body]
        """Last thing in ``run``; its value is ``run``'s."""

    def teardown(self) -> None:
        """Release what the loop holds."""

    def on_save_checkpoint(self) -> dict:
        """This loop's own state for ``state_dict``."""
        return {}

    def on_load_checkpoint(self, state_dict: dict) -> None:
        """Take back what ``on_save_checkpoint`` gave."""

    def state_dict(self, destination: dict | None = None, prefix: str = "") -> dict:
        """This loop's ``on_save_checkpoint()`` under ``prefix + "state_dict"``, and each sub-loop's state under
        its attribute name (``prefix + name + "."``), in one flat dict."""
        if destination is None:
            destination = {}
        destination[prefix + "state_dict"] = self.on_save_checkpoint()
        for name, value in self.__dict__.items():
            if isinstance(value, Loop):
                value.state_dict(destination, prefix + name + ".")
        return destination

    def load_state_dict(self, state_dict: dict, prefix: str = "", metrics: Any = None) -> None:
        """Give each loop of the tree its part of ``state_dict``; the loops are then ``restarting``."""
        if prefix + "state_dict" in state_dict:  # 1.9.5's: a state without one is taken as it is
            self.on_load_checkpoint(state_dict[prefix + "state_dict"])
        for name, value in self.__dict__.items():
            if isinstance(value, Loop):
                value.load_state_dict(state_dict.copy(), prefix + name + ".")
        self.restarting = True


def trainer_loop_class(name: str, module: str) -> type:
    """1.x's Trainer loop ``name``: importable (a ported import succeeds), refused when made, a subclass's
    ``super().__init__()`` included, with :data:`TRAINER_LOOPS_REFUSAL`."""
    return refused_class(name, TRAINER_LOOPS_REFUSAL, module=module)
