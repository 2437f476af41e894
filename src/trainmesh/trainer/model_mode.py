"""The model's train/eval mode around validation, testing and prediction, switched by the
Module's hooks as Lightning switches it (its evaluation and prediction loops): the eval hook
(``on_validation_model_eval``, ``on_test_model_eval``, ``on_predict_model_eval``; by default
``trainer.model.eval()``) before ``on_*_start``; after ``on_*_end`` the train hook where the
Module overrides it, otherwise each submodule's own mode back as it was (a frozen part left in
eval mode stays there). ``on_validation_model_zero_grad`` before a validation inside fit."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from torch import nn

from trainmesh.trainer.hooks import HookDispatcher
from trainmesh.utilities.rank_zero import rank_zero_warn
from trainmesh.utilities.warnings import PossibleUserWarning

_EVAL_HOOK = {
    "validate": "on_validation_model_eval",
    "sanity_check": "on_validation_model_eval",
    "test": "on_test_model_eval",
    "predict": "on_predict_model_eval",
}
_TRAIN_HOOK = {
    "validate": "on_validation_model_train",
    "sanity_check": "on_validation_model_train",
    "test": "on_test_model_train",
}  # prediction has none: the modes come back as they were


@contextmanager
def evaluation_mode(hooks: HookDispatcher, model: nn.Module, stage: str) -> Iterator[None]:
    """``model`` (the placed model, ``trainer.model``) in evaluation mode for ``stage``."""
    modes = [(module, module.training) for module in model.modules()]
    eval_hook = _EVAL_HOOK[stage]
    if hooks.module_overrides(eval_hook):
        hooks.call_module(eval_hook)
    else:
        model.eval()  # the default hook's work, without the call
    try:
        yield
    except BaseException:
        _restore(modes)  # a failed evaluation leaves no module in eval mode
        raise
    train_hook = _TRAIN_HOOK.get(stage)
    if train_hook is not None and hooks.module_overrides(train_hook):
        hooks.call_module(train_hook)
    else:
        _restore(modes)


def release_gradients(hooks: HookDispatcher, module: Any) -> None:
    """``on_validation_model_zero_grad``: by default ``module.zero_grad()`` (set to None)."""
    if hooks.module_overrides("on_validation_model_zero_grad"):
        hooks.call_module("on_validation_model_zero_grad")
    else:
        module.zero_grad()


def warn_of_modules_in_eval_mode(module: nn.Module) -> None:
    """Lightning's warning where training starts with modules in eval mode, in its words (nothing added: a
    program that reads the message sees Lightning's) and category (``PossibleUserWarning``, which
    ``disable_possible_user_warnings`` hides): it leaves each its mode (it calls no ``train()`` at fit's
    start), which is right for a frozen part and a surprise otherwise."""
    in_eval = [name for name, part in module.named_modules() if not part.training]
    if in_eval:
        rank_zero_warn(
            f"Found {len(in_eval)} module(s) in eval mode at the start of training. This may lead to unexpected"
            " behavior during training. If this is intentional, you can ignore this warning.",
            category=PossibleUserWarning,
        )


def _restore(modes: list[tuple[nn.Module, bool]]) -> None:
    for module, training in modes:
        module.training = training
