"""The methods a stage needs from the module, checked before any process starts or hook runs.

Without this, a module missing ``training_step`` fails at the first batch, deep inside the loop
after setup, placement and the sanity check; and one missing ``test_step`` makes ``trainer.test``
run the base class's empty step and return no metrics without a word. Lightning refuses both at
the start of the run (its configuration validator), and so does trainmesh, in one sentence.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from trainmesh.module import Module
from trainmesh.utilities.exceptions import MisconfigurationException, MisconfiguredType
from trainmesh.utilities.model_helpers import is_overridden
from trainmesh.utilities.rank_zero import rank_zero_warn
from trainmesh.utilities.signature_utils import is_param_in_hook_signature
from trainmesh.utilities.warnings import PossibleUserWarning

# stage -> the methods it calls, each with what it is for (the sentence's second half)
_REQUIRED: dict[str, tuple[tuple[str, str], ...]] = {
    "fit": (
        ("training_step", "it returns the loss of a batch"),
        ("configure_optimizers", "it returns the optimizer that steps the parameters"),
    ),
    "validate": (("validation_step", "Trainer.validate runs it on every batch"),),
    "test": (("test_step", "Trainer.test runs it on every batch"),),
}


# stage -> the step methods its loop calls on every batch
_STEPS = {
    "fit": ("training_step", "validation_step"),
    "validate": ("validation_step",),
    "test": ("test_step",),
    "predict": ("predict_step",),
}


def refuse_missing_steps(model: Any, stage: str) -> None:
    """Raise :class:`MisconfigurationException` when ``model`` lacks a method ``stage`` calls, or
    has a step that reads its batches itself (``dataloader_iter``), which trainmesh's loops do not
    give."""
    _refuse_stepless_object(model, stage)
    if stage == "predict":
        _refuse_unpredictable(model)
    for name in _STEPS.get(stage, ()):
        step = getattr(model, name, None)
        try:
            reads_itself = step is not None and "dataloader_iter" in inspect.signature(step).parameters
        except (TypeError, ValueError):  # no signature to read (a builtin): called with the batch
            reads_itself = False
        if reads_itself:
            raise MisconfigurationException(
                f"{type(model).__name__}.{name}() takes dataloader_iter (Lightning 2's step that fetches its "
                "own batches): trainmesh's loops give every step one batch, so it cannot run; take "
                f"(batch, batch_idx) in {name}() instead"
            )
    for name, purpose in _REQUIRED.get(stage, ()):
        if not is_overridden(name, model, parent=Module):  # Lightning's test, on trainmesh's placeholders
            needs = " and ".join(f"{method}()" for method, _ in _REQUIRED[stage])
            raise MisconfigurationException(
                f"{type(model).__name__} defines no {name}(), so trainer.{stage}() cannot run ({purpose}); "
                f"{stage} needs {needs} on the module (Lightning's words: No `{name}()` method defined to run "
                f"`Trainer.{stage}`)"
            )


def warn_unpaired_validation(model: Any, has_val_loader: bool) -> None:
    """Lightning's two warnings at the start of a fit whose validation cannot run: loaders without
    ``validation_step``, or ``validation_step`` without loaders (the fit then skips validation)."""
    has_val_step = is_overridden("validation_step", model, parent=Module)
    if has_val_loader and not has_val_step:
        rank_zero_warn("You passed in a `val_dataloader` but have no `validation_step`. Skipping val loop.")
    if has_val_step and not has_val_loader:
        rank_zero_warn(
            "You defined a `validation_step` but have no `val_dataloader`. Skipping val loop.",
            category=PossibleUserWarning,
        )


def _refuse_stepless_object(model: Any, stage: str) -> None:
    """Lightning's ``TypeError`` for a model that is no LightningModule (a bare ``nn.Linear``), in its words.
    trainmesh also runs a module of its own class that defines the stage's step, so only one without it is
    refused here (also a ``MisconfigurationException``, as the refusal of a missing step is)."""
    step = _STEPS[stage][0]
    if isinstance(model, Module) or callable(getattr(model, step, None)):
        return
    raise MisconfiguredType(
        f"`model` must be a `LightningModule` or `torch._dynamo.OptimizedModule`, got `{type(model).__qualname__}`"
        f" (it defines no {step}(), which trainer.{stage}() calls): subclass LightningModule and define {step}()"
    )


def _refuse_unpredictable(model: Any) -> None:
    # Lightning's rule: predict_step need not be overridden (the base one calls forward), but set to None
    # on the instance it switches prediction off, and without it forward must exist.
    name = type(model).__name__
    if getattr(model, "predict_step", None) is None:
        raise MisconfigurationException(
            f"`predict_step` cannot be None to run `Trainer.predict` (Lightning's words): {name}.predict_step is "
            "None, so trainer.predict() has no step to run; "
            "define predict_step(batch, batch_idx) or leave the base class's (it calls forward)"
        )
    if not is_overridden("predict_step", model, parent=Module) and not is_overridden("forward", model, parent=Module):
        raise MisconfigurationException(
            "`Trainer.predict` requires `forward` method to run (Lightning's words): "
            f"{name} defines neither predict_step(batch, batch_idx) nor forward(), so trainer.predict() has "
            "nothing to run; define one of them"
        )


def check_before_launch(model: Any, stage: str, *, ckpt_given: bool, has_val_loaders: Callable[[], bool]) -> None:
    """Lightning's configuration checks before any process starts: the methods the stage calls (an
    evaluation from a checkpoint is checked once it is loaded, as Lightning orders it) and, for a fit,
    validation without loaders or without a step."""
    if stage == "fit" or not ckpt_given:
        refuse_missing_steps(model, stage)
    if stage == "fit":
        warn_unpaired_validation(model, has_val_loaders())


# the loop's stage -> (Lightning's dataloader prefix, the step, its batch hooks)
_LOADER_HOOKS = {
    "validate": ("val", "validation_step", "on_validation_batch_start", "on_validation_batch_end"),
    "sanity_check": ("val", "validation_step", "on_validation_batch_start", "on_validation_batch_end"),
    "test": ("test", "test_step", "on_test_batch_start", "on_test_batch_end"),
    "predict": ("predict", "predict_step", "on_predict_batch_start", "on_predict_batch_end"),
}


def require_dataloader_idx(module: Any, stage: str, loaders: int) -> None:
    """Several loaders and a step (or batch hook) without ``dataloader_idx``: Lightning 2.6's
    ``_verify_dataloader_idx_requirement`` stops before the first batch (1.9.5 with a TypeError at
    it). Called with one argument fewer, the step would run every loader's batches as if from one."""
    if loaders < 2 or stage not in _LOADER_HOOKS:
        return
    prefix, *hooks = _LOADER_HOOKS[stage]
    for hook in hooks:
        if not is_param_in_hook_signature(getattr(module, hook), "dataloader_idx"):
            raise RuntimeError(
                f"You provided multiple `{prefix}_dataloader`, but no `dataloader_idx` argument in"
                f" `{type(module).__name__}.{hook}()`. Try adding `dataloader_idx=0` to its signature."
            )
