"""Lightning 2.6's ``LearningRateFinder`` and ``BatchSizeFinder`` callbacks, on the Tuner's searches.

As Lightning's, each search runs inside the fit, after ``configure_optimizers`` and before the
callbacks' ``on_fit_start`` (the finders are the first callbacks): the fit's training loop run again
per trial, then the weights, optimizers and loops restored (``trainer/finder_runs.py``,
``trainer/search_trials.py``); the callback then applies what was found where Lightning applies it.
A subclass calling ``lr_find`` / ``scale_batch_size`` later in the fit (say at an epoch's start)
stops with the reason at the fit's start (``refuse_later_searches``), before any search or step.
"""

from __future__ import annotations

import inspect
from typing import Any

from trainmesh.callbacks.base import Callback
from trainmesh.trainer_view import TrainerView
from trainmesh.utilities.lightning_loggers import lightning_named_logger
from trainmesh.utilities.parsing import lightning_setattr

_log = lightning_named_logger(__name__)  # Lightning's lines, governed as its loggers' by a program's settings

_NESTED = (
    "{cls}.{method}() during a running fit is not supported: Lightning runs the search as a nested fit "
    "inside the running one, and trainmesh runs a search only at the fit's start. trainmesh runs {cls}'s search "
    "there; to search again later, call trainmesh.tuner.Tuner(trainer).{method}(model, ...) "
    "between fits"
)


_LATER = (
    "{cls}.{hook} calls {method}(): a search during a running fit is not supported: Lightning runs such a search "
    "as a nested fit inside the running one, and trainmesh searches only at the fit's start (refused now, before "
    "any training, rather than when the hook runs). Search at the fit's start (the callback's own on_fit_start), "
    "or call trainmesh.tuner.Tuner(trainer).{method}(model, ...) between fits"
)


_SEARCHING = ("on_fit_start", "lr_find", "scale_batch_size", "search_arguments", "searched", "in_fit_search")


def refuse_later_searches(finders: list[Any]) -> None:
    """At the fit's start, before a search or a step: a finder subclass whose methods other than
    ``on_fit_start`` call ``lr_find`` / ``scale_batch_size`` (Lightning's documented milestone pattern)
    stops here, where it would otherwise stop when that hook first runs, the epochs before it lost."""
    for finder in finders:
        method = "lr_find" if isinstance(finder, LearningRateFinder) else "scale_batch_size"
        for klass in type(finder).__mro__:
            if klass in (LearningRateFinder, BatchSizeFinder):
                break
            for hook, function in vars(klass).items():
                if hook in _SEARCHING or not inspect.isfunction(function):
                    continue
                if method in function.__code__.co_names:
                    raise RuntimeError(_LATER.format(cls=type(finder).__name__, hook=hook, method=method))


class _DefaultTrue:
    """``update_attr``'s default: Lightning 2.6's ``True``, told apart from a ``True`` a program passes,
    since pytorch-lightning 1.9.5's callback defaults to ``False`` (a 1.x run reads it so)."""

    def __bool__(self) -> bool:
        return True

    def __repr__(self) -> str:
        return "True"


UPDATE_ATTR_DEFAULT: Any = _DefaultTrue()


class LearningRateFinder(Callback):
    """Lightning's learning-rate range test, run at the fit's start, its suggestion applied at ``on_fit_start``.

    The fit runs the search with these settings before the callbacks' ``on_fit_start`` (the random state
    kept as it was, as Lightning's ``isolate_rng``); at ``on_fit_start`` the suggestion goes to the model's
    ``lr`` / ``learning_rate`` (or ``attr_name``) and to every param group of the configured
    optimizers, as Lightning sets them after its search. ``optimal_lr`` holds the search (``.results``,
    ``.suggestion()``). One process only.

    Args:
        min_lr: the smallest rate tried (default ``1e-8``).
        max_lr: the largest rate tried (default ``1``).
        num_training_steps: rates tried, one step each (default ``100``).
        mode: ``"exponential"`` or ``"linear"`` steps between them (default ``"exponential"``).
        early_stop_threshold: stop once the loss exceeds this many times the best (None: never) (default ``4.0``).
        update_attr: apply the suggestion to the model and the optimizers (default ``True``; in a run
            written for pytorch-lightning 1.x, 1.9.5's default ``False``, and its rules: ``lightning1/tuner.py``).
        attr_name: the model's attribute holding the rate ("": ``lr`` or ``learning_rate``) (default ``""``).

    Examples:
        >>> finder = LearningRateFinder(num_training_steps=20)
        >>> # Trainer(callbacks=[finder]).fit(model); finder.optimal_lr.suggestion()
    """

    SUPPORTED_MODES = ("linear", "exponential")

    def __init__(
        self,
        min_lr: float = 1e-8,
        max_lr: float = 1,
        num_training_steps: int = 100,
        mode: str = "exponential",
        early_stop_threshold: float | None = 4.0,
        update_attr: bool = UPDATE_ATTR_DEFAULT,
        attr_name: str = "",
    ) -> None:
        mode = mode.lower()
        if mode not in self.SUPPORTED_MODES:
            raise ValueError(f"`mode` should be either of {self.SUPPORTED_MODES}")
        self._min_lr, self._max_lr, self._num_training_steps = min_lr, max_lr, num_training_steps
        self._mode, self._early_stop_threshold = mode, early_stop_threshold
        self._update_attr, self._attr_name = update_attr, attr_name
        self.optimal_lr: Any = None

    def search_arguments(self, pl_module: Any) -> dict[str, Any]:
        """The Tuner's ``lr_find`` arguments these settings make (the suggestion applied here, later);
        with ``update_attr``, a model without the attribute stops here, before the search, as Lightning's."""
        if self._update_attr:
            lr_attribute(pl_module, self._attr_name)
        return {
            "min_lr": self._min_lr,
            "max_lr": self._max_lr,
            "num_training": self._num_training_steps,
            "mode": self._mode,
            "early_stop_threshold": self._early_stop_threshold,
            "update_attr": False,
        }

    def searched(self, finder: Any) -> None:
        """The search the fit ran at its start (None under ``fast_dev_run``)."""
        self.optimal_lr = finder

    def lr_find(self, trainer: TrainerView, pl_module: Any) -> None:
        """Lightning's search, called later in a fit: refused (the fit has run it at its start)."""
        raise RuntimeError(_NESTED.format(cls=type(self).__name__, method="lr_find"))

    def on_fit_start(self, trainer: TrainerView, pl_module: Any) -> None:
        if getattr(trainer, "_written_for_lightning1", False):  # 1.9.5's search wrote it (a stand-in has none)
            return
        lr = None if self.optimal_lr is None or not self._update_attr else self.optimal_lr.suggestion()
        if lr is None:
            return
        lightning_setattr(pl_module, lr_attribute(pl_module, self._attr_name), lr)  # as Lightning's callback
        for optimizer in trainer.optimizers:  # training continues at the suggested rate, as in Lightning
            for group in optimizer.param_groups:
                group["lr"] = lr
        _log.info(f"Learning rate set to {lr}")  # Lightning's lr_find says it as it applies the suggestion


class BatchSizeFinder(Callback):
    """Lightning's batch size search, run at the fit's start; the size found is the model's (or data module's).

    The fit runs the search with these settings before the callbacks' ``on_fit_start``, which sets
    ``batch_arg_name`` where the batch size lives; the fit reads the train loader the search ended with (made at that size), as Lightning's.
    ``optimal_batch_size`` is the size found. For ``fit`` only, on one process, with the batch size
    read by the model's or data module's ``train_dataloader()``.

    Args:
        mode: ``"power"`` (doubling) or ``"binsearch"`` (doubling, then bisecting) (default ``"power"``).
        steps_per_trial: steps each size is tried for (default ``3``).
        init_val: the first size tried (default ``2``).
        max_trials: sizes tried at most (default ``25``).
        batch_arg_name: the attribute holding the batch size (default ``"batch_size"``).
        margin: ``binsearch``: the found size reduced by this share (default ``0.05``).
        max_val: the largest size tried (default ``8192``).

    Examples:
        >>> finder = BatchSizeFinder(mode="binsearch", max_trials=4)
        >>> # Trainer(callbacks=[finder]).fit(model); finder.optimal_batch_size
    """

    SUPPORTED_MODES = ("power", "binsearch")

    def __init__(
        self,
        mode: str = "power",
        steps_per_trial: int = 3,
        init_val: int = 2,
        max_trials: int = 25,
        batch_arg_name: str = "batch_size",
        margin: float = 0.05,
        max_val: int = 8192,
    ) -> None:
        mode = mode.lower()
        if mode not in self.SUPPORTED_MODES:
            raise ValueError(f"`mode` should be either of {self.SUPPORTED_MODES}")
        if not 0.0 <= margin < 1.0:
            raise ValueError(f"`margin` should be between 0 and 1. Found margin={margin}")
        self.optimal_batch_size: int | None = init_val
        self._mode, self._steps_per_trial, self._init_val = mode, steps_per_trial, init_val
        self._max_trials, self._batch_arg_name, self._margin, self._max_val = (
            max_trials,
            batch_arg_name,
            margin,
            max_val,
        )

    def search_arguments(self, pl_module: Any) -> dict[str, Any]:
        """The Tuner's ``scale_batch_size`` arguments these settings make."""
        return {
            "mode": self._mode,
            "steps_per_trial": self._steps_per_trial,
            "init_val": self._init_val,
            "max_trials": self._max_trials,
            "batch_arg_name": self._batch_arg_name,
            "margin": self._margin,
            "max_val": self._max_val,
        }

    def searched(self, size: int | None) -> None:
        """The size the fit's search found at its start (None under ``fast_dev_run``)."""
        self.optimal_batch_size = size

    def scale_batch_size(self, trainer: TrainerView, pl_module: Any) -> None:
        """Lightning's search, called later in a fit: refused (the fit has run it at its start)."""
        raise RuntimeError(_NESTED.format(cls=type(self).__name__, method="scale_batch_size"))

    def setup(self, trainer: TrainerView, pl_module: Any, stage: str) -> None:
        if stage != "fit":
            raise ValueError(
                f"BatchSizeFinder during {getattr(stage, 'value', stage)} is not supported: trainmesh searches the batch size for fit only "
                "(Lightning also scales validate/test/predict loaders); remove the callback from this Trainer, "
                "or set the batch size found by fit yourself"
            )


def lr_attribute(model: Any, attr_name: str = "") -> str:
    """Where the model keeps its learning rate: ``attr_name``, else ``lr`` or ``learning_rate``, on
    the model or in its ``hparams`` (Lightning's ``_determine_lr_attr_name``)."""
    hparams = getattr(model, "hparams", {})
    if attr_name:
        if not (hasattr(model, attr_name) or attr_name in hparams):
            raise AttributeError(
                f"The attribute name for the learning rate was set to {attr_name}, but"
                " could not find this as a field in `model` or `model.hparams`."
            )
        return attr_name
    for name in ("lr", "learning_rate"):
        if hasattr(model, name) or name in hparams:
            return name
    raise AttributeError(
        "When using the learning rate finder, either `model` or `model.hparams` should"
        " have one of these fields: ('lr', 'learning_rate'). If your model has a different name for the learning"
        " rate, set it with `.lr_find(attr_name=...)`."
    )
