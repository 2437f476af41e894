"""``ModelPruning``, as Lightning 2.6 defines it (its ``callbacks/pruning.py``), on
``torch.nn.utils.prune``: at each training epoch's end (or validation epoch's, with
``prune_on_train_epoch_end=False``) the parameters to prune (by default every ``weight`` and
``bias`` of the model's layers) are pruned by ``amount`` (a count, a fraction, or a function of
the epoch), all together (``use_global_unstructured``) or each alone; with the lottery ticket
hypothesis the weights left are reset to their values before training (or resampled); at
training's end the pruning is made permanent, and a checkpoint holds the pruned weights.

>>> pruning = ModelPruning("l1_unstructured", amount=lambda epoch: 0.5 if epoch == 1 else 0)

Refused before training: a strategy that shards parameters (the masks and ``*_orig`` parameters
would be sharded by a different plan than the parameters they replace).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from copy import deepcopy
from functools import partial
from typing import Any

import torch.nn.utils.prune as pytorch_prune
from torch import Tensor, nn

from trainmesh.callbacks.base import Callback
from trainmesh.trainer_view import TrainerView
from trainmesh.utilities.collections import apply_to_tensors
from trainmesh.utilities.exceptions import MisconfiguredValue
from trainmesh.utilities.lightning_loggers import lightning_named_logger

log = lightning_named_logger(__name__)  # governed as Lightning's by a program's settings of its loggers

_PRUNING_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "ln_structured": pytorch_prune.ln_structured,
    "l1_unstructured": pytorch_prune.l1_unstructured,
    "random_structured": pytorch_prune.random_structured,
    "random_unstructured": pytorch_prune.random_unstructured,
}
_PRUNING_METHODS: dict[str, type[pytorch_prune.BasePruningMethod]] = {
    "ln_structured": pytorch_prune.LnStructured,
    "l1_unstructured": pytorch_prune.L1Unstructured,
    "random_structured": pytorch_prune.RandomStructured,
    "random_unstructured": pytorch_prune.RandomUnstructured,
}
Parameters = Sequence[tuple[nn.Module, str]]
_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)


class ModelPruning(Callback):
    """Prune the model's parameters with ``torch.nn.utils.prune`` during training (see the module's docstring).

    Args:
        pruning_fn: ``"l1_unstructured"``, ``"random_unstructured"``, ``"ln_structured"`` or ``"random_structured"``, or a ``torch.nn.utils.prune.BasePruningMethod`` subclass (the class, not an instance; only with ``use_global_unstructured=True``).
        parameters_to_prune: ``(module, parameter name)`` pairs to prune, checked against the model at setup (empty: every ``parameter_names`` parameter of the model's layers) (default ``()``).
        parameter_names: the parameter names to prune when ``parameters_to_prune`` is empty: ``"weight"`` and/or ``"bias"`` (None: both) (default ``None``).
        use_global_unstructured: prune all the parameters together, by one threshold over them (needs an unstructured method); False prunes each parameter alone (default ``True``).
        amount: how much to prune each time: an int (a count of parameters), a float in [0, 1] (a fraction), or a function of the epoch giving either; 0 prunes nothing that epoch (default ``0.5``).
        apply_pruning: whether to prune, or a function of the epoch saying whether to (default ``True``).
        make_pruning_permanent: at training's end remove the pruning's reparametrization (``*_orig`` and ``*_mask``), and save checkpoints with the pruned values under the parameters' own names (default ``True``).
        use_lottery_ticket_hypothesis: after each pruning reset the weights left to their values before training, or a function of the epoch saying whether to (default ``True``).
        resample_parameters: with the lottery ticket hypothesis, reset to freshly initialised values (the layer's ``reset_parameters``) instead of the original ones (default ``False``).
        pruning_dim: the dimension pruned by the structured methods (required by them) (default ``None``).
        pruning_norm: the norm of ``"ln_structured"`` (required by it) (default ``None``).
        verbose: 0: silent; 1 or 2: log the pruned share after each pruning (default ``0``).
        prune_on_train_epoch_end: prune at the training epoch's end; False: at the validation epoch's end (default ``True``).

    Examples:
        >>> pruning = ModelPruning("l1_unstructured", amount=0.2, use_lottery_ticket_hypothesis=False)
        >>> # Trainer(callbacks=[pruning]): 20% of the remaining weights and biases pruned each epoch
    """

    PARAMETER_NAMES = ("weight", "bias")

    def __init__(
        self,
        pruning_fn: Callable[..., Any] | str,
        parameters_to_prune: Parameters = (),
        parameter_names: list[str] | None = None,
        use_global_unstructured: bool = True,
        amount: int | float | Callable[[int], int | float] = 0.5,
        apply_pruning: bool | Callable[[int], bool] = True,
        make_pruning_permanent: bool = True,
        use_lottery_ticket_hypothesis: bool | Callable[[int], bool] = True,
        resample_parameters: bool = False,
        pruning_dim: int | None = None,
        pruning_norm: int | None = None,
        verbose: int = 0,
        prune_on_train_epoch_end: bool = True,
    ) -> None:
        self._use_global_unstructured = use_global_unstructured
        self._parameters_to_prune = parameters_to_prune
        self._use_lottery_ticket_hypothesis = use_lottery_ticket_hypothesis
        self._resample_parameters = resample_parameters
        self._prune_on_train_epoch_end = prune_on_train_epoch_end
        self._parameter_names = parameter_names or self.PARAMETER_NAMES
        self._global_kwargs: dict[str, Any] = {}
        self._original_layers: dict[int, dict[str, Any]] | None = None
        self._pruning_method_name: str | None = None
        for name in self._parameter_names:
            if name not in self.PARAMETER_NAMES:
                raise MisconfiguredValue(f"The provided `parameter_names` name: {name} isn't in {self.PARAMETER_NAMES}")
        self.pruning_fn = self._pruning_function(pruning_fn, pruning_dim, pruning_norm)
        if use_global_unstructured and self.pruning_fn.PRUNING_TYPE != "unstructured":
            raise MisconfiguredValue(
                'Only the "unstructured" PRUNING_TYPE is supported with `use_global_unstructured=True`.'
                f" Found method {self.pruning_fn} of type {self.pruning_fn.PRUNING_TYPE}. "
            )
        self._apply_pruning = apply_pruning
        self._make_pruning_permanent = make_pruning_permanent
        if not (isinstance(amount, (int, float)) or callable(amount)):
            raise MisconfiguredValue("`amount` should be provided and be either an int, a float or Callable function.")
        self.amount = amount
        if verbose not in (0, 1, 2):
            raise MisconfiguredValue("`verbose` must be any of (0, 1, 2)")
        self._verbose = verbose

    def _pruning_function(self, pruning_fn: Any, dim: int | None, norm: int | None) -> Any:
        """A torch pruning method class (global pruning) or function (each parameter alone)."""
        if isinstance(pruning_fn, str):
            kwargs: dict[str, Any] = {}
            pruning_fn = pruning_fn.lower()
            if pruning_fn not in _PRUNING_FUNCTIONS:
                raise MisconfiguredValue(
                    f"The provided `pruning_fn` {pruning_fn} isn't available in PyTorch's"
                    f" built-in functions: {list(_PRUNING_FUNCTIONS.keys())} "
                )
            if pruning_fn.endswith("_structured"):
                if dim is None:
                    raise MisconfiguredValue(
                        "When requesting `structured` pruning, the `pruning_dim` should be provided."
                    )
                if pruning_fn == "ln_structured":
                    if norm is None:
                        raise MisconfiguredValue(
                            "When requesting `ln_structured` pruning, the `pruning_norm` should be provided."
                        )
                    kwargs["n"] = norm
                kwargs["dim"] = dim
            return self._create_pruning_fn(pruning_fn, **kwargs)
        if self._is_pruning_method(pruning_fn):
            if not self._use_global_unstructured:
                raise MisconfiguredValue(
                    "PyTorch `BasePruningMethod` is currently only supported with `use_global_unstructured=True`."
                )
            return pruning_fn
        raise MisconfiguredValue(
            f"`pruning_fn` is expected to be a str in {list(_PRUNING_FUNCTIONS.keys())}"
            f" or a PyTorch `BasePruningMethod`. Found: {pruning_fn}."
            " HINT: if passing a `BasePruningMethod`, pass the class, not an instance"
        )

    def filter_parameters_to_prune(self, parameters_to_prune: Parameters = ()) -> Parameters:
        """Override to choose among the parameters to prune."""
        return parameters_to_prune

    def _create_pruning_fn(self, pruning_fn: str, **kwargs: Any) -> Any:
        if self._use_global_unstructured:
            method = _PRUNING_METHODS[pruning_fn]
            self._global_kwargs, self._pruning_method_name = kwargs, method.__name__
            return method
        function = _PRUNING_FUNCTIONS[pruning_fn]
        self._pruning_method_name = function.__name__
        return partial(function, **kwargs)

    def make_pruning_permanent(self, module: nn.Module) -> None:
        """Remove the pruning's reparametrization: the pruned values become the parameters."""
        for _, sub in module.named_modules():
            for key in list(sub._forward_pre_hooks):
                hook = sub._forward_pre_hooks[key]
                if isinstance(hook, pytorch_prune.BasePruningMethod):
                    hook.remove(sub)
                    del sub._forward_pre_hooks[key]

    @staticmethod
    def _copy_param(new: nn.Module, old: nn.Module, name: str) -> None:
        dst = getattr(new, name + "_orig") if hasattr(new, name + "_orig") else getattr(new, name)
        src = getattr(old, name)
        if isinstance(dst, Tensor) and isinstance(src, Tensor):
            dst.data = src.data.to(dst.device)

    def apply_lottery_ticket_hypothesis(self) -> None:
        """The unpruned values reset to those before training (or resampled: ``resample_parameters``)."""
        assert self._original_layers is not None
        for layer in self._original_layers.values():
            copy = layer["data"]
            if self._resample_parameters and callable(getattr(copy, "reset_parameters", None)):
                copy = deepcopy(copy)  # the original values kept
                copy.reset_parameters()
            for i, name in layer["names"]:
                self._copy_param(self._parameters_to_prune[i][0], copy, name)

    def apply_pruning(self, amount: int | float) -> None:
        before = [self._get_pruned_stats(m, n) for m, n in self._parameters_to_prune] if self._verbose else []
        if self._use_global_unstructured:
            self._global_kwargs["amount"] = amount
            accepted = set(inspect.signature(self.pruning_fn).parameters) - {"self"}
            kwargs = {k: v for k, v in self._global_kwargs.items() if k in accepted}
            pytorch_prune.global_unstructured(self._parameters_to_prune, pruning_method=self.pruning_fn, **kwargs)
        else:
            for module, name in self._parameters_to_prune:
                self.pruning_fn(module, name=name, amount=amount)
        if self._verbose:
            after = [self._get_pruned_stats(m, n) for m, n in self._parameters_to_prune]
            total, zeros_before, zeros = sum(t for _, t in after), sum(z for z, _ in before), sum(z for z, _ in after)
            log.info(
                f"Applied `{self._pruning_method_name}`. Pruned: {zeros_before}/{total} ({zeros_before / total:.2%})"
                f" -> {zeros}/{total} ({zeros / total:.2%})"
            )
        if self._verbose == 2:  # Lightning's line for each parameter too
            for (module, name), (was, size_was), (now, size) in zip(self._parameters_to_prune, before, after):
                log.info(
                    f"Applied `{self._pruning_method_name}` to `{module!r}.{name}` with amount={amount}. Pruned:"
                    f" {was} ({was / size_was:.2%}) -> {now} ({now / size:.2%})"
                )

    @staticmethod
    def _get_pruned_stats(module: nn.Module, name: str) -> tuple[int, int]:
        mask = getattr(module, f"{name}_mask", None)
        return (0, 1) if mask is None else (int((mask == 0).sum().item()), mask.numel())

    def setup(self, trainer: TrainerView, pl_module: Any, stage: str) -> None:
        if trainer.runtime.capabilities.shards_parameters:
            raise ValueError(
                "ModelPruning with a strategy that shards parameters: the pruning's masks and `*_orig` parameters "
                "would not follow the parameters' sharding. Prune under ddp or on one device."
            )
        parameters = self.sanitize_parameters_to_prune(pl_module, self._parameters_to_prune, self._parameter_names)
        self._parameters_to_prune = self.filter_parameters_to_prune(parameters)
        if self._use_lottery_ticket_hypothesis:
            self._original_layers = {}
            for i, (module, name) in enumerate(self._parameters_to_prune):
                layer = self._original_layers.setdefault(id(module), {"data": deepcopy(module), "names": []})
                layer["names"].append((i, name))

    def _run_pruning(self, current_epoch: int) -> None:
        prune = self._apply_pruning(current_epoch) if callable(self._apply_pruning) else self._apply_pruning
        amount = self.amount(current_epoch) if callable(self.amount) else self.amount
        if not prune or not amount:
            return
        self.apply_pruning(amount)
        lottery = self._use_lottery_ticket_hypothesis
        if lottery(current_epoch) if callable(lottery) else lottery:
            self.apply_lottery_ticket_hypothesis()

    def on_train_epoch_end(self, trainer: TrainerView, pl_module: Any) -> None:
        if self._prune_on_train_epoch_end:
            self._run_pruning(pl_module.current_epoch)

    def on_validation_epoch_end(self, trainer: TrainerView, pl_module: Any) -> None:
        if not trainer.sanity_checking and not self._prune_on_train_epoch_end:
            self._run_pruning(pl_module.current_epoch)

    def on_train_end(self, trainer: TrainerView, pl_module: Any) -> None:
        if self._make_pruning_permanent:
            self.make_pruning_permanent(pl_module)

    def on_save_checkpoint(self, trainer: TrainerView, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        """The checkpoint holds the pruned values under the parameters' own names."""
        if self._make_pruning_permanent:
            state_dict = pl_module.state_dict()
            for name in {k[: -len("_mask")] for k in state_dict if k.endswith("_mask")}:
                orig, mask = state_dict.pop(name + "_orig"), state_dict.pop(name + "_mask")
                state_dict[name] = mask.to(dtype=orig.dtype) * orig
            checkpoint["state_dict"] = apply_to_tensors(state_dict, lambda t: t.cpu())

    @staticmethod
    def sanitize_parameters_to_prune(
        pl_module: nn.Module, parameters_to_prune: Parameters = (), parameter_names: Sequence[str] = ()
    ) -> Parameters:
        """``parameters_to_prune`` checked against the model; by default every layer's ``parameter_names``."""
        names = parameter_names or ModelPruning.PARAMETER_NAMES
        layers = [m for m in pl_module.modules() if not isinstance(m, _CONTAINERS) and not _is_lightning_module(m)]
        if not parameters_to_prune:
            return [(m, p) for p in names for m in layers if isinstance(getattr(m, p, None), nn.Parameter)]
        if not (
            isinstance(parameters_to_prune, (list, tuple))
            and all(len(p) == 2 for p in parameters_to_prune)
            and all(isinstance(a, nn.Module) and isinstance(b, str) for a, b in parameters_to_prune)
        ):
            raise MisconfiguredValue(
                "The provided `parameters_to_prune` should either be list of tuple"
                " with 2 elements: (nn.Module, parameter_name_to_prune) or None"
            )
        missing_modules = [m for m, _ in parameters_to_prune if m not in layers]
        missing_parameters = [n for m, n in parameters_to_prune if m in layers and not hasattr(m, n)]
        if missing_modules or missing_parameters:
            raise MisconfiguredValue(
                "Some provided `parameters_to_prune` don't exist in the model."
                f" Found missing modules: {missing_modules} and missing parameters: {missing_parameters}"
            )
        return parameters_to_prune

    @staticmethod
    def _is_pruning_method(method: Any) -> bool:
        return inspect.isclass(method) and issubclass(method, pytorch_prune.BasePruningMethod)


def _is_lightning_module(module: nn.Module) -> bool:
    """A trainmesh Module (Lightning skips LightningModules, the root among them, as containers);
    told by its classes, as this layer does not import the Module."""
    return any(c.__module__ == "trainmesh.module" and c.__name__ == "Module" for c in type(module).__mro__)
