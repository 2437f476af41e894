"""A watch that trainmesh writes nothing onto the user's model, optimizer and metrics, nor their classes.

``Untouched(model, *others)`` (a Keras callback) notes, as every batch of fit, evaluate and predict begins (its
end would make it a reader of the batch logs, which trainmesh makes over all processes), and at
their beginnings and ends, each instance attribute of the model, its optimizer, its metrics (and ``others``)
that is one of the names trainmesh once rebound there, or that stands in front of a method of the object's
class and did not before; and each change to the program's own classes of those objects (their ``__dict__``).
``WatchedAdam`` looks at itself (names of REBOUND) whenever it is built (zero1 rebuilds the optimizer on each
process's part when training begins). What was seen: ``touched()`` (empty under Keras' own fit).
"""

import keras

# What trainmesh.keras put on the user's objects before routes.py (sync.py, zero.py, batch_metrics.py, draws.py).
REBOUND = {
    "train_step",
    "test_step",
    "predict_step",
    "compute_metrics",
    "_get_metrics_result_or_logs",
    "finalize_variable_values",
    "add_variable_from_reference",
    "update_state",
    "apply",
}

_SEEN: set[str] = set()


def touched() -> list[str]:
    return sorted(_SEEN)


def clear() -> None:
    _SEEN.clear()


def shadowing(thing) -> set[str]:
    """The instance attributes of ``thing`` in front of a method of its class (Keras puts its own wrappers
    of ``build`` and ``quantize`` on a functional model when it is made)."""
    return {name for name in vars(thing) if callable(getattr(type(thing), name, None))}


def look_at(thing, where: str, before: set[str] = frozenset()) -> None:
    """Notes each instance attribute of ``thing`` of a name of REBOUND, or in front of a method of its class
    and not among ``before`` (those it had before the run)."""
    for name in vars(thing).keys() & REBOUND | shadowing(thing) - before:
        _SEEN.add(f"{type(thing).__name__}.{name} (instance attribute, {where})")


def own_classes(*things) -> list[type]:
    """The program's own classes of ``things`` and above them, up to Keras' own."""
    found = []
    for thing in things:
        for cls in type(thing).__mro__:
            if cls.__module__.split(".")[0] == "keras" or cls is object:
                break
            if cls not in found:
                found.append(cls)
    return found


class WatchedAdam(keras.optimizers.Adam):
    """Adam, looking at its own attributes when built."""

    def build(self, variables):
        super().build(variables)
        look_at(self, "build")


class Untouched(keras.callbacks.Callback):
    def __init__(self, model, *others):
        super().__init__()
        self.others = others
        self.classes = {cls: dict(vars(cls)) for cls in own_classes(model, model.optimizer, *others)}
        self.before = {id(thing): shadowing(thing) for thing in (model, model.optimizer, *others)}

    def look(self, where: str) -> None:
        model = self.model
        compiled = getattr(model, "_compile_metrics", None)
        metrics = [*model.metrics, *(compiled.metrics if compiled is not None and compiled.built else [])]
        for thing in (model, model.optimizer, *metrics, *self.others):
            look_at(thing, where, self.before.get(id(thing), set()))
        for cls, before in self.classes.items():
            now = dict(vars(cls))
            for name in before.keys() | now.keys():
                if before.get(name) is not now.get(name):
                    _SEEN.add(f"{cls.__name__}.{name} (class attribute, {where})")

    def on_train_begin(self, logs=None):
        self.look("on_train_begin")

    def on_train_batch_begin(self, batch, logs=None):
        self.look("on_train_batch_begin")

    def on_epoch_end(self, epoch, logs=None):
        self.look("on_epoch_end")

    def on_train_end(self, logs=None):
        self.look("on_train_end")

    def on_test_batch_begin(self, batch, logs=None):
        self.look("on_test_batch_begin")

    def on_test_end(self, logs=None):
        self.look("on_test_end")

    def on_predict_batch_begin(self, batch, logs=None):
        self.look("on_predict_batch_begin")
